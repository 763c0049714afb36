"""Runs `gcp-storage-emulator` (from requirements.lock) with two fixes, as the tests start it:
`python -m tests.gcs_emulator start --host=... --port=...` takes the emulator's own arguments.
Both are applied before the emulator's server module reads its handler table.

Empty uploads: the emulator's XML API upload (`PUT /BUCKET/OBJECT`, what tensorflow-io's GCS
plugin sends) fails with a TypeError on an empty body, because its request reader answers None
rather than b"" for no bytes; the plugin then retries for minutes. Real GCS stores an empty
object, and TensorFlow writes one for every folder it makes (`tf.io.gfile.makedirs`: TFX makes
each output folder of each component so), so without this no TFX pipeline root could be on the
emulator.

Generation preconditions: the emulator ignores `ifGenerationMatch` on uploads and deletes (the
JSON API's, what google-cloud-storage sends), where real GCS applies the request only if the
object's generation matches and otherwise answers 412 Precondition Failed, 0 meaning "no live
object" (https://cloud.google.com/storage/docs/request-preconditions). A lock in a bucket
(pipelines/core/lease_lock.py) is built on exactly that, so the emulator is made to check it
too. Its server answers one request at a time (http.server's HTTPServer, no threads), so the
check and the write cannot be interleaved by another request.
"""

from __future__ import annotations

import sys
from http import HTTPStatus

from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import objects

_xml_upload = objects.xml_upload
_insert = objects.insert
_delete = objects.delete


def _xml_upload_of_empty_objects_too(request, response, storage, *args, **kwargs):
    if request.data is None:
        request._data = b""  # what the emulator's reader gives for a body with bytes in it
    return _xml_upload(request, response, storage, *args, **kwargs)


def _generation_does_not_match(request, response, storage, object_id) -> bool:
    """Answers 412 as GCS does, and says so, when `ifGenerationMatch` names another generation
    than the object's (0 when there is none)."""
    wanted = request.query.get("ifGenerationMatch")
    if not wanted or object_id is None:
        return False
    try:
        current = storage.get_file_obj(request.params["bucket_name"], object_id)["generation"]
    except NotFound:
        current = "0"
    if str(wanted[0]) == str(current):
        return False
    message = "At least one of the pre-conditions you specified did not hold."
    response.status = HTTPStatus.PRECONDITION_FAILED
    response.json(
        {
            "error": {
                "code": 412,
                "message": message,
                "errors": [{"domain": "global", "reason": "conditionNotMet", "message": message}],
            }
        }
    )
    return True


def _uploaded_name(request) -> str | None:
    """The object an upload (media, multipart or resumable) names: the query's `name`, else
    its metadata's."""
    if "name" in request.query:
        return request.query["name"][0]
    kind = (request.query.get("uploadType") or [""])[0]
    data = request.data if kind in ("multipart", "resumable") else None
    if kind == "multipart" and isinstance(data, dict):
        return (data.get("meta") or {}).get("name")
    if kind == "resumable" and isinstance(data, dict):
        return data.get("name")
    return None


def _insert_if_generation_matches(request, response, storage, *args, **kwargs):
    if _generation_does_not_match(request, response, storage, _uploaded_name(request)):
        return None
    return _insert(request, response, storage, *args, **kwargs)


def _delete_if_generation_matches(request, response, storage, *args, **kwargs):
    if _generation_does_not_match(request, response, storage, request.params["object_id"]):
        return None
    return _delete(request, response, storage, *args, **kwargs)


objects.xml_upload = _xml_upload_of_empty_objects_too
objects.insert = _insert_if_generation_matches
objects.delete = _delete_if_generation_matches

from gcp_storage_emulator.__main__ import main  # noqa: E402 - after the fixes, which it reads

if __name__ == "__main__":
    sys.exit(main())
