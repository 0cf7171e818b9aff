"""Fail fast on gs:// paths without Google Cloud credentials.

Without credentials, Beam's GCS file system logs the missing credentials, goes on anonymously
and retries every request with back-off: listing one gs:// glob took 134 s and four
tracebacks to fail (issue 13, item 7). ``check_credentials`` asks google-auth for the
application-default credentials once, before any gs:// path is touched, and turns their absence
into one line that says how to authenticate.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Mapping, Sequence

HOW_TO_AUTHENTICATE = ("run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS "
                       "to a service-account key file (on GCE, GKE and Dataflow the VM's service account "
                       "is found by itself)")


class CredentialsError(Exception):
    """A gs:// path was given and no Google Cloud credentials were found."""


class MissingDataflowExtra(CredentialsError):
    """A gs:// path or DataflowRunner was given and the Google Cloud packages are not installed
    (the runtime install leaves them to the dataflow extra). A CredentialsError, so every caller
    that ends on a missing credential in one line ends on this one the same way."""


# What gs:// and DataflowRunner import: google-auth (check_credentials), Beam's GCS file system
# (google-cloud-storage) and its Dataflow client (google-apitools); all from the dataflow extra.
DATAFLOW_MODULES = ("google.auth", "google.cloud.storage", "apitools")
INSTALL_DATAFLOW = ("pip install '.[dataflow]' (from a clone; "
                    "`pip install -c constraints.txt -e '.[dataflow]'` for the tested pins)")


def missing_modules(modules: Sequence[str] = DATAFLOW_MODULES) -> list:
    """The modules of ``modules`` that cannot be imported here (found without importing them)."""
    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # a parent package (google.cloud) is absent
            found = False
        if not found:
            missing.append(name)
    return missing


# What Beam logs when it is imported without the dataflow extra: a root-logger WARNING from its
# BigQuery client stubs ("apitools not found, ...") in every process that imports Beam, and an
# INFO from its BigQuery I/O. Both are expected on the runtime install and say nothing about a
# local job, so they are dropped while the extra is absent (quiet_beam_without_the_extra).
BEAM_WITHOUT_GCP = ("apitools not found, and bigquery client libraries",
                    "No module named google.cloud.bigquery_storage")


class _BeamWithoutGcp(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(BEAM_WITHOUT_GCP)


def quiet_beam_without_the_extra() -> None:
    """Drops BEAM_WITHOUT_GCP's records when the dataflow extra is absent; run by the package's
    __init__, before anything imports Beam. (Beam's warning still configures the root logger
    once, so the jobs configure theirs with force=True: cli.log_to_stderr.)"""
    if missing_modules(("apitools",)):
        for name in ("", "apache_beam.io.gcp.bigquery"):
            logging.getLogger(name).addFilter(_BeamWithoutGcp())


def require_dataflow_extra(what: str) -> None:
    """MissingDataflowExtra naming ``what`` (e.g. "--input=gs://b/x" or "--runner=DataflowRunner")
    and the install command, when the dataflow extra's modules are absent."""
    missing = missing_modules()
    if missing:
        raise MissingDataflowExtra(f"{what} needs the Google Cloud packages, which this install lacks "
                                   f"(no {', '.join(missing)}): {INSTALL_DATAFLOW}")


def check_credentials(paths: Mapping[str, str]) -> None:
    """Raises CredentialsError naming the first gs:// path of ``paths`` ({flag: path}) when
    google-auth finds no application-default credentials; does nothing without gs:// paths."""
    gs = [(flag, path) for flag, path in paths.items() if path and str(path).startswith("gs://")]
    if not gs:
        return
    require_dataflow_extra(f"{gs[0][0]}={gs[0][1]}")
    import google.auth
    from google.auth import exceptions

    flag, path = gs[0]
    auth_log = logging.getLogger("google.auth")
    level = auth_log.level
    auth_log.setLevel(logging.ERROR)  # its metadata-server warnings would bury the one line owed
    try:
        google.auth.default(scopes=["https://www.googleapis.com/auth/devstorage.read_write"])
    except exceptions.DefaultCredentialsError as e:
        raise CredentialsError(f"{flag}={path} needs Google Cloud credentials and none were found; "
                               f"{HOW_TO_AUTHENTICATE}") from e
    finally:
        auth_log.setLevel(level)
