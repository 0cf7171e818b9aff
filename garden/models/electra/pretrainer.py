"""ELECTRA replaced token detection (Clark et al., 2020): masking, generator, Gumbel sampling,
discriminator, and the joint loss (docs/objectives.md section 6).

One training step, all in the graph and all from one seed tensor:
  1. mask: N = int((mask_prob + 0.005) * T) slots; num_to_predict = max(1, min(N,
     round(real_tokens * mask_prob))) distinct positions drawn uniformly among the maskable
     tokens; 85% of them become [MASK], 15% stay unchanged (no random replacement).
  2. the generator (a small ElectraBackbone + MLM head tied to the shared word table) scores
     the masked positions;
  3. a token is sampled at every masked position from the generator's softmax at temperature 1
     with the Gumbel-max trick, under stop-gradient (the sample is discrete: no gradient flows
     from the discriminator into the generator);
  4. the discriminator reads the corrupted sequence and predicts, for every real token, whether
     it was replaced. A sample equal to the original token counts as original (label 0).
  loss = mlm_loss + disc_weight * disc_loss, disc_weight = 50, both towers trained in one step.

Which model is which (and which Hugging Face class it converts from):
  ElectraGenerator      = generator tower + MLM head        (HF ElectraForMaskedLM)
  ElectraDiscriminator  = discriminator tower + RTD head    (HF ElectraForPreTraining)
  ElectraPretrainer     = both, sharing the embeddings, with masking and sampling in between.
Fine-tuning loads `ElectraPretrainer.discriminator` (an ElectraBackbone).
"""

from __future__ import annotations

from typing import Dict, Sequence

import keras
import tensorflow as tf

from garden.losses import (ELECTRA_EPSILON, masked_lm_metrics, weighted_sigmoid_cross_entropy,
                           with_total_loss)
from garden.layers.embeddings import truncated_normal
from garden.models.electra.backbone import ElectraBackbone
from garden.models.backbone import backbone_inputs
from garden.models.pretrainer import Pretrainer, masked_lm_graph, tied_masked_lm_head

_BACKBONE_INPUTS = ("token_ids", "segment_ids", "padding_mask")

# === The objective as plain TF functions (eager-testable, used by the layers below) ===


def electra_mask(token_ids, padding_mask, seed, mask_token_id: int,
                 unmaskable_token_ids: Sequence[int] = (), mask_prob: float = 0.15
                 ) -> Dict[str, tf.Tensor]:
    """ELECTRA's dynamic masking of a batch (pretrain_helpers.mask of the original code).

    N = int((mask_prob + 0.005) * T) prediction slots (15% of 128 -> 19; at least 1).
    Each row predicts num_to_predict = max(1, min(N, round(real_tokens * mask_prob))) distinct
    positions (also at most its number of maskable tokens), drawn uniformly without replacement
    among the real tokens whose id is not in `unmaskable_token_ids` ([CLS], [SEP], ...). Of
    those, 85% are replaced by [MASK] and 15% left unchanged; none gets a random token. The
    remaining slots are padding: position 0, id 0, weight 0.

    Args:
        token_ids: int [B, T], the original tokens.
        padding_mask: int or bool [B, T], 1 for real tokens.
        seed: int [2], stateless seed; the same seed gives the same masking.
        mask_token_id: int, id of [MASK].
        unmaskable_token_ids: ids never masked, e.g. those of [CLS] and [SEP].
        mask_prob: float, fraction of the real tokens to predict (0.15; 0.25 for large).

    Returns:
        dict: token_ids int32 [B, T] (the generator input), masked_lm_positions int32 [B, N],
        masked_lm_ids int32 [B, N] (originals), masked_lm_weights float32 [B, N].
    """
    token_ids = tf.cast(token_ids, tf.int32)
    real = tf.cast(padding_mask, tf.bool)
    length = tf.shape(token_ids)[1]
    # int() of a float64, as the formula in Python: 0.155 * 128 = 19.84 -> 19.
    num_slots = tf.cast(tf.math.floor((mask_prob + 0.005) * tf.cast(length, tf.float64)), tf.int32)
    num_slots = tf.clip_by_value(num_slots, 1, length)

    candidates = real
    if len(unmaskable_token_ids):
        special = tf.constant(list(unmaskable_token_ids), tf.int32)
        is_special = tf.reduce_any(tf.equal(token_ids[..., None], special), axis=-1)
        candidates = tf.logical_and(candidates, tf.logical_not(is_special))
    num_real = tf.reduce_sum(tf.cast(real, tf.float32), axis=-1)
    num_to_predict = tf.maximum(1, tf.minimum(num_slots, tf.cast(tf.round(num_real * mask_prob), tf.int32)))
    num_to_predict = tf.minimum(num_to_predict, tf.reduce_sum(tf.cast(candidates, tf.int32), -1))

    position_seed, keep_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    # Uniform keys on the candidates, -1 elsewhere: the top-N keys are N distinct positions,
    # a uniform draw without replacement among the candidates (first the real predictions).
    keys = tf.random.stateless_uniform(tf.shape(token_ids), position_seed)
    keys = tf.where(candidates, keys, -1.0)
    positions = tf.math.top_k(keys, k=num_slots, sorted=True).indices
    in_use = tf.sequence_mask(num_to_predict, num_slots)
    positions = tf.where(in_use, positions, 0)
    ids = tf.where(in_use, tf.gather(token_ids, positions, batch_dims=1), 0)

    to_mask = tf.logical_and(in_use, tf.random.stateless_uniform(tf.shape(positions), keep_seed) < 0.85)
    hits = _scatter_flags(positions, to_mask, length)
    return {
        "token_ids": tf.where(hits, tf.cast(mask_token_id, tf.int32), token_ids),
        "masked_lm_positions": positions,
        "masked_lm_ids": ids,
        "masked_lm_weights": tf.cast(in_use, tf.float32),
    }


def electra_replace(mlm_logits, token_ids, masked_lm_positions, masked_lm_weights, seed,
                    temperature: float = 1.0) -> Dict[str, tf.Tensor]:
    """Samples the generator's tokens into the original sequence and labels the replacements.

    sample = argmax(logits / temperature + Gumbel noise), one draw per masked slot from the
    generator's softmax, under stop-gradient. Every slot in use (the [MASK]ed 85% and the
    unchanged 15%) receives its sample; a position is labelled "replaced" (1) only where the
    sample differs from the original token, so a generator that guesses right produces label 0.

    Args:
        mlm_logits: float [B, N, V], generator logits at the masked slots.
        token_ids: int [B, T], the original (unmasked) tokens.
        masked_lm_positions: int [B, N]; masked_lm_weights: float [B, N] (0 = padding slot).
        seed: int [2], stateless seed.
        temperature: float, softmax temperature of the sampling (1.0).

    Returns:
        dict: token_ids int32 [B, T] (the discriminator input), sampled_ids int32 [B, N],
        labels int32 [B, T] (1 = replaced).
    """
    token_ids = tf.cast(token_ids, tf.int32)
    logits = tf.stop_gradient(tf.cast(mlm_logits, tf.float32)) / temperature
    uniform = tf.random.stateless_uniform(tf.shape(logits), seed, minval=1e-9, maxval=1.0)
    gumbel = -tf.math.log(-tf.math.log(uniform))
    sampled = tf.argmax(logits + gumbel, axis=-1, output_type=tf.int32)

    positions = tf.cast(masked_lm_positions, tf.int32)
    in_use = tf.cast(masked_lm_weights, tf.float32) > 0
    length = tf.shape(token_ids)[1]
    # Slots in use hold distinct positions, so the sum picks exactly one sample per position.
    slot_of = tf.one_hot(positions, length, dtype=tf.int32) * tf.cast(in_use, tf.int32)[..., None]
    sampled_at = tf.reduce_sum(slot_of * sampled[..., None], axis=1)
    corrupted = tf.where(tf.reduce_max(slot_of, axis=1) > 0, sampled_at, token_ids)
    return {
        "token_ids": corrupted,
        "sampled_ids": tf.where(in_use, sampled, 0),
        "labels": tf.cast(tf.not_equal(corrupted, token_ids), tf.int32),
    }


def _scatter_flags(positions, flags, length):
    """[B, T] bool: True at positions[b, n] wherever flags[b, n]."""
    one_hot = tf.one_hot(positions, length, on_value=True, off_value=False, dtype=tf.bool)
    return tf.reduce_any(tf.logical_and(one_hot, flags[..., None]), axis=1)


def electra_pretrain_loss(outputs: Dict[str, tf.Tensor], disc_weight: float = 50.0,
                          mlm_denominator=None, disc_denominator=None) -> Dict[str, tf.Tensor]:
    """Generator MLM loss + disc_weight * discriminator loss of one (per-replica) batch.

    mlm_loss = sum(w * nll) / (sum(w) + 1e-6) over the masked slots; disc_loss = the sigmoid
    cross-entropy averaged over all real tokens (padding counts nothing), as the original
    ELECTRA. Plain TF ops, no Keras metric objects, so it runs inside `strategy.run`.

    Args:
        outputs: ElectraPretrainer outputs (mlm_logits, masked_lm_ids, masked_lm_weights,
            disc_logits, disc_labels, disc_weights).
        disc_weight: float, lambda of the paper (50).
        mlm_denominator, disc_denominator: optional float scalars replacing sum(weights) + 1e-6,
            for a trainer that normalises by the global weight sums across replicas.

    Returns:
        dict of float32 scalars: loss, mlm_loss, disc_loss, mlm_accuracy, disc_accuracy,
        replaced_fraction (of the real tokens the discriminator saw).
    """
    mlm = masked_lm_metrics(outputs["mlm_logits"], outputs["masked_lm_ids"],
                            outputs["masked_lm_weights"], mlm_denominator,
                            epsilon=ELECTRA_EPSILON)
    disc_loss, disc_accuracy, replaced = weighted_sigmoid_cross_entropy(
        outputs["disc_logits"], outputs["disc_labels"], outputs["disc_weights"],
        disc_denominator, epsilon=ELECTRA_EPSILON)
    return with_total_loss({**mlm, "disc_loss": disc_loss, "disc_accuracy": disc_accuracy,
                            "replaced_fraction": replaced}, mlm=1.0, disc=disc_weight)


@keras.saving.register_keras_serializable(package="garden")
class ElectraMasking(keras.layers.Layer):
    """`electra_mask` as a layer: (token_ids, padding_mask, seed [2]) -> dict of its outputs.

    It masks with fold_in(seed, 0) and ElectraReplacement samples with fold_in(seed, 1), so
    the pretrainer's one input seed gives two independent streams.

    Args: mask_token_id, unmaskable_token_ids, mask_prob as `electra_mask`.
    """

    def __init__(self, mask_token_id: int, unmaskable_token_ids: Sequence[int] = (),
                 mask_prob: float = 0.15, **kwargs):
        super().__init__(**kwargs)
        self.mask_token_id = int(mask_token_id)
        self.unmaskable_token_ids = [int(i) for i in unmaskable_token_ids]
        self.mask_prob = float(mask_prob)

    def call(self, token_ids, padding_mask, seed):
        seed = tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int32), 0)
        return electra_mask(token_ids, padding_mask, seed, self.mask_token_id,
                            self.unmaskable_token_ids, self.mask_prob)

    def get_config(self):
        config = super().get_config()
        config.update(mask_token_id=self.mask_token_id,
                      unmaskable_token_ids=list(self.unmaskable_token_ids),
                      mask_prob=self.mask_prob)
        return config


@keras.saving.register_keras_serializable(package="garden")
class ElectraReplacement(keras.layers.Layer):
    """`electra_replace` as a layer: Gumbel samples of the generator into the input, labels.

    Args: temperature as `electra_replace`.
    """

    def __init__(self, temperature: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.temperature = float(temperature)

    def call(self, mlm_logits, token_ids, masked_lm_positions, masked_lm_weights, seed):
        seed = tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int32), 1)
        return electra_replace(mlm_logits, token_ids, masked_lm_positions, masked_lm_weights,
                               seed, self.temperature)

    def get_config(self):
        config = super().get_config()
        config.update(temperature=self.temperature)
        return config


@keras.saving.register_keras_serializable(package="garden")
class ElectraDiscriminatorHead(keras.layers.Layer):
    """Replaced token detection head: dense(H, gelu) -> dense(1), one logit per token.

    As HF ElectraDiscriminatorPredictions and the original `discriminator_predictions`. The
    logits are float32 whatever the dtype policy (they feed a sigmoid cross-entropy).

    Args:
        activation: str or callable, activation of the hidden dense (ELECTRA: exact GELU).
        initializer_range: float, stddev of the kernel initializers.
        **kwargs: name, dtype, trainable.

    Example:
        head = ElectraDiscriminatorHead()
        logits = head(backbone(inputs)["sequence_output"])  # [B, T] float32
        probability_replaced = keras.ops.sigmoid(logits)
    """

    def __init__(self, activation="gelu", initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.activation = keras.activations.get(activation)
        self.initializer_range = float(initializer_range)

    def build(self, inputs_shape):
        hidden_size = inputs_shape[-1]
        self.dense = keras.layers.Dense(
            hidden_size, activation=self.activation,
            kernel_initializer=truncated_normal(self.initializer_range),
            dtype=self.dtype_policy, name="dense")
        self.dense.build(inputs_shape)
        self.dense_prediction = keras.layers.Dense(
            1, kernel_initializer=truncated_normal(self.initializer_range), dtype="float32",
            name="dense_prediction")
        self.dense_prediction.build(tuple(inputs_shape[:-1]) + (hidden_size,))
        self.built = True

    def call(self, inputs):
        x = self.dense(inputs)
        return self.dense_prediction(tf.cast(x, tf.float32))[..., 0]

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(tuple(inputs.shape[:-1]), dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update(activation=keras.activations.serialize(self.activation),
                      initializer_range=self.initializer_range)
        return config


# === Single-tower models (what the Hugging Face head checkpoints convert to) ===


@keras.saving.register_keras_serializable(package="garden")
class ElectraGenerator(Pretrainer):
    """The ELECTRA generator: a (small) ElectraBackbone with the MLM head tied to its word table.

    The head is HF's ElectraGeneratorPredictions + generator_lm_head and the original
    `generator_predictions`: dense(E, gelu) -> LayerNorm -> word_table^T + output bias, at the
    given positions (pass arange(T) for every position).

    Inputs (dict, int32): token_ids, segment_ids, padding_mask [B, T], masked_lm_positions
    [B, P]. Outputs (dict): mlm_logits float32 [B, P, V].

    Args:
        backbone: ElectraBackbone, the generator tower.
        **kwargs: name, trainable.

    Example:
        generator = ElectraGenerator(untrained_electra_generator("electra_small", vocab_size=1000))
        positions = np.arange(16)[None].repeat(2, 0)
        logits = generator({**backbone_inputs, "masked_lm_positions": positions})["mlm_logits"]
    """

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        masked_lm_head = tied_masked_lm_head(backbone)

        # === Functional graph ===
        inputs, _, mlm_logits = masked_lm_graph(backbone, masked_lm_head, _BACKBONE_INPUTS)
        super().__init__(inputs=inputs, outputs={"mlm_logits": mlm_logits}, **kwargs)

        # === Config ===
        self.backbone = backbone
        self.masked_lm_head = masked_lm_head


@keras.saving.register_keras_serializable(package="garden")
class ElectraDiscriminator(Pretrainer):
    """The ELECTRA discriminator: an ElectraBackbone with the replaced token detection head.

    Inputs (dict, int32 [B, T]): token_ids, segment_ids, padding_mask. Outputs (dict):
    disc_logits float32 [B, T] (> 0: "this token was replaced").

    Args:
        backbone: ElectraBackbone, the discriminator tower.
        **kwargs: name, trainable.

    Example:
        discriminator = ElectraDiscriminator(untrained_electra_backbone("electra_small"))
        logits = discriminator(backbone_inputs)["disc_logits"]  # [B, T]
        replaced = logits > 0
    """

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        discriminator_head = ElectraDiscriminatorHead(
            activation="gelu", initializer_range=backbone.initializer_range,
            dtype=backbone.dtype_policy, name="discriminator_head")

        # === Functional graph ===
        inputs = backbone_inputs(_BACKBONE_INPUTS)
        sequence_output = backbone(inputs)["sequence_output"]
        disc_logits = discriminator_head(sequence_output)
        super().__init__(inputs=inputs, outputs={"disc_logits": disc_logits}, **kwargs)

        # === Config ===
        self.backbone = backbone
        self.discriminator_head = discriminator_head


# === The joint model ===


@keras.saving.register_keras_serializable(package="garden")
class ElectraPretrainer(keras.Model):
    """ELECTRA's generator and discriminator trained jointly (Clark et al., 2020, section 2).

    Inputs (dict): token_ids, segment_ids, padding_mask int32 [B, T] (the unmasked text) and
    seed int32 [2] (no batch dimension; the trainer derives it from its seed and step, so the
    masking and the samples are reproducible). Outputs (dict), everything the loss needs:
        masked_token_ids [B, T]      the generator's input ([MASK] at 85% of the slots)
        masked_lm_positions, masked_lm_ids [B, N] int32; masked_lm_weights [B, N] float32
        mlm_logits [B, N, V] float32 the generator's scores at the slots
        corrupted_token_ids [B, T]   the discriminator's input (generator samples in place)
        disc_logits [B, T] float32;  disc_labels [B, T] int32 (1 = replaced);
        disc_weights [B, T] float32  (1 = real token: the discriminator loss covers them all)
    `electra_pretrain_loss(outputs, pretrainer.disc_weight)` turns them into the loss.

    The two towers share the word, position and token-type tables and the embedding LayerNorm
    (one TransformerEmbeddings layer): build the generator with the discriminator's
    `embeddings` (`untrained_electra_generator` does). The generator's MLM output projection
    is that shared word table. Each tower keeps its own E -> H projection.

    Args:
        generator: ElectraBackbone, the generator tower (hidden size a fraction of the
            discriminator's), sharing `discriminator.embeddings`.
        discriminator: ElectraBackbone, the discriminator tower: what fine-tuning loads.
        mask_token_id: int, id of [MASK] in the vocabulary.
        unmaskable_token_ids: ids never masked ([CLS], [SEP]; padding is excluded by the mask).
        mask_prob: float, fraction of real tokens predicted (0.15; ELECTRA-large 0.25).
        temperature: float, sampling temperature of the generator (1.0).
        disc_weight: float, weight of the discriminator loss (50.0).
        **kwargs: name, trainable.

    Example:
        pretrainer = untrained_electra_pretrainer("electra_small", mask_token_id=103, unmaskable_token_ids=(101, 102), vocab_size=30522)
        outputs = pretrainer({**backbone_inputs, "seed": np.array([0, step], "int32")})
        metrics = electra_pretrain_loss(outputs, pretrainer.disc_weight)
    """

    def __init__(self, generator, discriminator, mask_token_id: int,
                 unmaskable_token_ids: Sequence[int] = (), mask_prob: float = 0.15,
                 temperature: float = 1.0, disc_weight: float = 50.0, **kwargs):
        if generator.embeddings is not discriminator.embeddings:
            raise ValueError(
                "the generator and the discriminator must share one embeddings layer: build "
                "the generator with embeddings=discriminator.embeddings (see "
                "untrained_electra_generator)")
        # === Layers ===
        generator_model = ElectraGenerator(generator, name="generator_model")
        discriminator_model = ElectraDiscriminator(discriminator, name="discriminator_model")
        masking = ElectraMasking(mask_token_id, unmaskable_token_ids, mask_prob, name="masking")
        replacement = ElectraReplacement(temperature, name="replacement")

        # === Functional graph ===
        inputs = backbone_inputs(_BACKBONE_INPUTS)
        inputs["seed"] = keras.Input(batch_shape=(2,), dtype="int32", name="seed")
        masked = masking(inputs["token_ids"], inputs["padding_mask"], inputs["seed"])
        mlm_logits = generator_model({
            "token_ids": masked["token_ids"], "segment_ids": inputs["segment_ids"],
            "padding_mask": inputs["padding_mask"],
            "masked_lm_positions": masked["masked_lm_positions"]})["mlm_logits"]
        fake = replacement(mlm_logits, inputs["token_ids"], masked["masked_lm_positions"],
                           masked["masked_lm_weights"], inputs["seed"])
        disc_logits = discriminator_model({
            "token_ids": fake["token_ids"], "segment_ids": inputs["segment_ids"],
            "padding_mask": inputs["padding_mask"]})["disc_logits"]
        outputs = {
            "masked_token_ids": masked["token_ids"],
            "masked_lm_positions": masked["masked_lm_positions"],
            "masked_lm_ids": masked["masked_lm_ids"],
            "masked_lm_weights": masked["masked_lm_weights"],
            "mlm_logits": mlm_logits,
            "corrupted_token_ids": fake["token_ids"],
            "disc_logits": disc_logits,
            "disc_labels": fake["labels"],
            "disc_weights": keras.ops.cast(inputs["padding_mask"], "float32"),
        }
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.generator = generator
        self.discriminator = discriminator
        self.generator_model = generator_model
        self.discriminator_model = discriminator_model
        self.mask_token_id = int(mask_token_id)
        self.unmaskable_token_ids = [int(i) for i in unmaskable_token_ids]
        self.mask_prob = float(mask_prob)
        self.temperature = float(temperature)
        self.disc_weight = float(disc_weight)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "generator": keras.layers.serialize(self.generator),
            "discriminator": keras.layers.serialize(self.discriminator),
            "mask_token_id": self.mask_token_id,
            "unmaskable_token_ids": list(self.unmaskable_token_ids),
            "mask_prob": self.mask_prob,
            "temperature": self.temperature,
            "disc_weight": self.disc_weight,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        discriminator = keras.layers.deserialize(config.pop("discriminator"))
        generator_config = config.pop("generator")["config"]
        # The shared embeddings are not in the tower's config: tie them again here.
        generator = ElectraBackbone.from_config(
            {**generator_config, "embeddings": discriminator.embeddings})
        return cls(generator, discriminator, **config)

