"""Runs `gcp-storage-emulator` (from requirements.lock) with one fix, as the tests start it:
`python -m tests.gcs_emulator start --host=... --port=...` takes the emulator's own arguments.

The fix: the emulator's XML API upload (`PUT /BUCKET/OBJECT`, what tensorflow-io's GCS plugin
sends) fails with a TypeError on an empty body, because its request reader answers None rather
than b"" for no bytes; the plugin then retries for minutes. Real GCS stores an empty object, and
TensorFlow writes one for every folder it makes (`tf.io.gfile.makedirs`: TFX makes each output
folder of each component so), so without this no TFX pipeline root could be on the emulator.
The fix is applied before the emulator's server module reads its handler table.
"""

from __future__ import annotations

import sys

from gcp_storage_emulator.handlers import objects

_xml_upload = objects.xml_upload


def _xml_upload_of_empty_objects_too(request, response, storage, *args, **kwargs):
    if request.data is None:
        request._data = b""  # what the emulator's reader gives for a body with bytes in it
    return _xml_upload(request, response, storage, *args, **kwargs)


objects.xml_upload = _xml_upload_of_empty_objects_too

from gcp_storage_emulator.__main__ import main  # noqa: E402 - after the fix, which it reads

if __name__ == "__main__":
    sys.exit(main())
