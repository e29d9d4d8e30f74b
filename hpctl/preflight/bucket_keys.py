"""bucket-key: the data bucket's customer key names its users (the environment's roles,
FSx's role and `storage.buckets.key_user_arns`; platform_constructs/storage.py BucketKey), so
after a deploy anyone else who reads the bucket gets AccessDenied on every object written
from then on. With no `key_user_arns` and a data bucket that already holds objects, someone
outside the platform probably uses that data: a warning, not a problem (the platform works;
the outside readers stop)."""

from __future__ import annotations

from config.schema.storage import DATA_BUCKET_OUTPUT
from hpctl.aws import AwsCallError, call, stack_output
from hpctl.preflight.context import OK, SKIPPED, WARNING, CheckContext, Row, failure_row

BUCKET_KEY = "bucket-key"
# ListObjectsV2 is authorized as s3:ListBucket (Service Authorization Reference, Amazon S3).
LIST_BUCKET_ACTION = "s3:ListBucket"


def bucket_key_rows(context: CheckContext) -> list[Row]:
    config = context.config
    users = config.storage.buckets.key_user_arns
    if users:
        return [
            Row(
                BUCKET_KEY,
                "data bucket",
                OK,
                f"storage.buckets.key_user_arns names {len(users)} key user(s) outside the "
                "platform",
            )
        ]
    stack = config.names.stack("storage")
    try:
        bucket = stack_output(context.connection, stack, DATA_BUCKET_OUTPUT)
    except AwsCallError as failure:
        if failure.code == "ValidationError" and "does not exist" in failure.message:
            return [
                Row(BUCKET_KEY, "data bucket", SKIPPED, f"{stack} is not deployed: no data yet")
            ]
        return [failure_row(failure, BUCKET_KEY, "data bucket")]
    if bucket is None:
        return [
            Row(BUCKET_KEY, "data bucket", SKIPPED, f"{stack} has no {DATA_BUCKET_OUTPUT} output")
        ]
    try:
        listed = call(context.client("s3"), "list_objects_v2", Bucket=bucket, MaxKeys=1)
    except AwsCallError as failure:
        failure.action = LIST_BUCKET_ACTION
        return [failure_row(failure, BUCKET_KEY, bucket)]
    if not listed.get("KeyCount", 0):
        return [Row(BUCKET_KEY, bucket, OK, "holds no objects: no outside readers to keep")]
    return [
        Row(
            BUCKET_KEY,
            bucket,
            WARNING,
            "holds objects and storage.buckets.key_user_arns is empty: the bucket key admits "
            f"only role/{config.names.stack_prefix}-* and FSx, so other readers get "
            "AccessDenied on objects written after the deploy",
            "add every role that reads or writes the bucket from outside the cluster to "
            "storage.buckets.key_user_arns",
        )
    ]
