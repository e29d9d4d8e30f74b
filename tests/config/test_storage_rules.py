"""One test per rule of the `storage` section, starting from config/dev.yaml: each bad value
gives exactly one line naming the field."""

from __future__ import annotations

import pytest

from tests.support import environment_data, loaded_from, one_error_on


def _fsx(**values):
    return lambda d: d["storage"]["fsx"].update(values)


@pytest.mark.parametrize("iops", [1000, 2000, 13000, 204000])
def test_rule_metadata_iops_must_be_a_valid_value(iops):
    line = one_error_on("storage.fsx.metadata_iops", _fsx(metadata_iops=iops))
    assert f"{iops} is not an FSx for Lustre metadata IOPS value" in line


@pytest.mark.parametrize("iops", [1500, 3000, 6000, 12000, 24000, 192000])
def test_valid_metadata_iops_are_accepted(iops):
    data = environment_data("dev")
    data["storage"]["fsx"]["metadata_iops"] = iops
    assert loaded_from(data).config.storage.fsx.metadata_iops == iops


@pytest.mark.parametrize("path", ["/data//raw", "/data/../etc", "/./data", "/data/."])
def test_rule_file_system_path_must_be_normalized(path):
    line = one_error_on(
        "storage.fsx.data_repository.file_system_path",
        _fsx(data_repository={"file_system_path": path}),
    )
    assert "not a normalized path" in line


@pytest.mark.parametrize("field", ["auto_import", "auto_export"])
def test_rule_repository_events_listed_once(field):
    line = one_error_on(
        f"storage.fsx.data_repository.{field}", _fsx(data_repository={field: ["NEW", "NEW"]})
    )
    assert line == (
        f"storage.fsx.data_repository.{field}: listed more than once: NEW; list each event once"
    )


def test_data_noncurrent_days_is_bounded():
    line = one_error_on(
        "storage.buckets.data_noncurrent_days",
        lambda d: d["storage"]["buckets"].update(data_noncurrent_days=0),
    )
    assert "0 is too small; use 1 or more" in line


def test_key_users_are_iam_role_or_user_arns():
    line = one_error_on(
        "storage.buckets.key_user_arns",
        lambda d: d["storage"].setdefault("buckets", {}).update(key_user_arns=["ingest"]),
    )
    assert "is not an IAM role or user ARN" in line


def test_key_users_are_listed_once():
    arn = "arn:aws:iam::111111111111:role/ingest"
    line = one_error_on(
        "storage.buckets.key_user_arns",
        lambda d: d["storage"].setdefault("buckets", {}).update(key_user_arns=[arn, arn]),
    )
    assert "list each principal once" in line
