"""Fail fast on gs:// paths without Google Cloud credentials.

Without credentials, Beam's GCS file system logs the missing credentials, goes on anonymously
and retries every request with back-off: listing one gs:// glob took 134 s and four
tracebacks to fail (issue 13, item 7). ``check_credentials`` asks google-auth for the
application-default credentials once, before any gs:// path is touched, and turns their absence
into one line that says how to authenticate.
"""

from __future__ import annotations

import logging
from typing import Mapping

HOW_TO_AUTHENTICATE = ("run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS "
                       "to a service-account key file (on GCE, GKE and Dataflow the VM's service account "
                       "is found by itself)")


class CredentialsError(Exception):
    """A gs:// path was given and no Google Cloud credentials were found."""


def check_credentials(paths: Mapping[str, str]) -> None:
    """Raises CredentialsError naming the first gs:// path of ``paths`` ({flag: path}) when
    google-auth finds no application-default credentials; does nothing without gs:// paths."""
    gs = [(flag, path) for flag, path in paths.items() if path and str(path).startswith("gs://")]
    if not gs:
        return
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
