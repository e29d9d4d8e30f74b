"""S3 objects read by byte range (boto3), for the streaming data source and pretrained weights.

boto3 rather than s3torchconnector: the reads here are many small ranged GETs at offsets the
caller computes (a sample window, a tensor's rows), which is one ``get_object(Range=...)``
each; boto3 honours ``AWS_ENDPOINT_URL_S3`` (any S3-compatible endpoint, a local one in the
tests) and is in the image already (the managed checkpoint library's dependency).
"""

from __future__ import annotations

import threading
from typing import Any

S3_SCHEME = "s3://"


def is_s3(url: str) -> bool:
    return url.startswith(S3_SCHEME)


def split_url(url: str) -> tuple[str, str]:
    """s3://bucket/key -> (bucket, key); a one-line error naming the URL otherwise."""
    if not is_s3(url):
        raise ValueError(f"{url!r} is not an s3:// URL")
    bucket, _, key = url[len(S3_SCHEME) :].partition("/")
    if not bucket:
        raise ValueError(f"{url!r} names no bucket (expected s3://bucket/prefix)")
    return bucket, key


_local = threading.local()


def client() -> Any:
    """One boto3 S3 client per thread (sessions are not thread-safe; clients from one are)."""
    c = getattr(_local, "client", None)
    if c is None:
        import boto3

        c = boto3.session.Session().client("s3")
        _local.client = c
    return c


def read_range(bucket: str, key: str, start: int, stop: int) -> bytes:
    """Bytes [start, stop) of an object; exactly that many, or ValueError (an offset computed
    from a file's own header must not reach outside the object, or count from its end)."""
    if start < 0 or stop < 0:
        raise ValueError(f"s3://{bucket}/{key}: negative byte range [{start}, {stop})")
    if stop <= start:
        return b""
    resp = client().get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{stop - 1}")
    data: bytes = resp["Body"].read()
    if len(data) != stop - start:
        raise ValueError(
            f"s3://{bucket}/{key}: bytes [{start}, {stop}) ran past the end of the object "
            f"({len(data)} of {stop - start} read)"
        )
    return data


def object_size(bucket: str, key: str) -> int:
    return int(client().head_object(Bucket=bucket, Key=key)["ContentLength"])


def error_code(error: Exception) -> str:
    """S3's error code in a botocore ClientError (``NoSuchKey``, ``403``, ...), else ""."""
    response = getattr(error, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def is_missing(error: Exception) -> bool:
    """True for S3's answer that an object does not exist (or may not be read): asking again
    gets the same answer."""
    return error_code(error) in ("404", "NoSuchKey", "NoSuchBucket", "403", "AccessDenied")


def read_object(bucket: str, key: str) -> bytes:
    data: bytes = client().get_object(Bucket=bucket, Key=key)["Body"].read()
    return data


def list_objects(bucket: str, prefix: str) -> list[tuple[str, int]]:
    """(key, size) of every object under `prefix`, sorted by key."""
    out: list[tuple[str, int]] = []
    for page in client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [(o["Key"], int(o["Size"])) for o in page.get("Contents", [])]
    return sorted(out)
