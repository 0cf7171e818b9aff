"""garden.export_features and the FeatureServing it exports (garden/serving/features.py): ELMo's
biLM, pretrained by garden.train on characters, exported as raw text -> scalar-mixed features,
served by garden.serve over REST in a fresh process; the served features equal the Keras
backbone's."""

import numpy as np

from serve_testing import Client, ServerProcess


def test_elmo_features_are_served_from_raw_text(tmp_path, bilm_data):
    from objective_testing import bilm_lm_args
    from testing import train_in_process

    from garden import export_features, runs
    from garden.serving import features

    vocab, data = bilm_data("--characters", "--max_characters=20", documents=60)
    lm_dir = tmp_path / "elmo"
    train_in_process(bilm_lm_args("configs/elmo_tiny.gin", lm_dir, vocab, data, 5,
                                  "--gin_param=train.global_batch_size=8",
                                  "--gin_param=train.warmup_steps=1"),
                     str(lm_dir), "elmo_pretraining", 5)
    assert export_features.main([f"--model_dir={lm_dir}", f"--export_base={tmp_path / 'exports'}",
                                 "--max_seq_length=16"]) == 0

    run = runs.open(str(lm_dir))
    packer = run.packer(16)
    backbone = features.text_backbone(run.backbone(max_seq_length=16), str(vocab))
    texts = ["the cat sat on the mat .", "a longer sentence about python code ."]
    expected = backbone({k: v for k, v in packer.encode_numpy(texts).items()
                         if k in backbone.input}, training=False)["sequence_output"].numpy()

    server = ServerProcess(["--model_name=features",
                            f"--model_base_path={tmp_path / 'exports' / 'features'}"],
                           str(tmp_path / "serve.log"))
    try:
        client = Client(server)
        status, _, body = client.post("/v1/models/features:predict", {"instances": texts})
        assert status == 200, body
        for k, prediction in enumerate(body["predictions"]):
            mask = np.asarray(prediction["padding_mask"])
            assert prediction["tokens"][0] == "[CLS]" and prediction["tokens"][mask.sum() - 1] \
                == "[SEP]"
            got = np.asarray(prediction["features"])
            assert got.shape == expected[k].shape == (16, 32)
            np.testing.assert_allclose(got[mask > 0], expected[k][mask > 0], atol=1e-4)
        client.close()
    finally:
        assert server.stop() == 0
