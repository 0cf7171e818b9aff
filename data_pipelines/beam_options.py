"""Beam's side of the jobs' command line: the runner a job's options name (the offline local
runner by default), and --dry_run for Dataflow.

A job's parser holds only its own flags; whatever it does not know must be a flag of one of
Beam's PipelineOptions classes (--runner, --direct_num_workers, --project, --region, ...),
which go to ``PipelineOptions`` unchanged (checked by job_flags.split_args, before Beam loads).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Optional

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TestOptions

from text.flags import parse_bool

_LOG = logging.getLogger("data_pipelines.beam_options")


def runner_name(options: PipelineOptions) -> str:
    return options.view_as(StandardOptions).runner or "DirectRunner"


def make_runner(options: PipelineOptions):
    """The runner for ``options``: Beam's FnApiRunner for DirectRunner (or no --runner).

    Beam's DirectRunner first tries the Prism runner, a Go binary it downloads at run time;
    the jobs must run offline, so the local runner is the Python FnApiRunner (what
    DirectRunner falls back to), which honours --direct_num_workers / --direct_running_mode.
    Any other --runner is returned by name for Beam to resolve.
    """
    name = options.view_as(StandardOptions).runner
    if name not in (None, "DirectRunner", "direct", "SwitchingDirectRunner"):
        return name
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


def is_dry_run(options: PipelineOptions) -> bool:
    """--dry_run (Beam's TestOptions): DataflowRunner builds the job and does not submit it."""
    return parse_bool(options.view_as(TestOptions).dry_run or False)


def save_dataflow_job(result, output_dir: str) -> Optional[str]:
    """Writes a dry run's job description (the Dataflow job and the portable pipeline proto) to
    ``<output_dir>/dataflow_job.json`` when output_dir is local (else prints it); returns the
    path, or None."""
    from google.protobuf import json_format

    job = getattr(result, "job", None)
    if job is None:
        _LOG.info("dry run: the runner built no job description")
        return None
    description = {
        "job": json.loads(job.json()),
        "pipeline": json_format.MessageToDict(job.proto_pipeline),
    }
    text = json.dumps(description, indent=1, sort_keys=True)
    transforms = job.proto_pipeline.components.transforms
    names = sorted({t.unique_name.split("/")[0] for t in transforms.values() if t.unique_name})
    print(f"dry run: built Dataflow job {job.proto.name!r} with {len(transforms)} transforms "
          f"({', '.join(names)}); not submitted")
    if "://" in output_dir:
        print(text)
        return None
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "dataflow_job.json")
    with open(path, "w") as f:
        f.write(text)
    print(f"dry run: job description written to {path}")
    return path
