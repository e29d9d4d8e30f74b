"""cdk.json decides every CDK feature flag, so `cdk synth` ends without the notice
"N feature flags are not configured".

The Python bindings of aws-cdk-lib expose no FEATURE_FLAGS or CURRENTLY_RECOMMENDED_FLAGS,
so the flag metadata is read from the installed aws-cdk-lib in two ways, without
synthesizing the platform:

- the flags and values `cdk init` writes into a new project's cdk.json: the
  `recommended-feature-flags.json` inside the library's jsii bundle;
- the feature-flag report that every App writes into its cloud assembly (one empty App is
  synthesized, about a second): the CLI prints the notice for each flag that cdk.json
  leaves unset and whose unconfigured behaviour differs from its recommended value.

A flag set to anything but its recommended value needs a reason in NON_RECOMMENDED.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from stacks.platform import cdk_json_context
from stacks.toolchain import use_bundled_node

REPO = Path(__file__).resolve().parent.parent

# Flag -> why cdk.json keeps a value other than the recommended one. All but
# target-partitions keep the unconfigured (old) behaviour because the recommended value
# changes the synthesized templates.
NON_RECOMMENDED: dict[str, str] = {
    "@aws-cdk/core:explicitStackTags": (
        "true stops `Tags.of(app)` from becoming stack tags (the cloud assembly's manifest, "
        "not the templates, so no snapshot shows it); CloudFormation copies stack tags to "
        "resources CDK cannot tag itself, such as the raw AWS::SageMaker::ComputeQuota, so "
        "the environment tags would silently disappear from those on the next deploy."
    ),
    "@aws-cdk/core:defaultCrossStackReferences": (
        "'strong' (the unconfigured behaviour) keeps the Export/Fn::ImportValue references "
        "between the stacks; 'weak' turns them into Fn::GetStackOutput, which "
        "platform_constructs/nag.py cannot write as a cdk-nag finding (synthesis fails), "
        "and a deployed app moves to 'weak' only through 'both' (two deployments)."
    ),
    "@aws-cdk/core:target-partitions": (
        "The platform deploys to the aws partition only; ['aws', 'aws-cn'] synthesizes the "
        "same templates (every stack has an explicit region)."
    ),
    "@aws-cdk/aws-lambda:useCdkManagedLogGroup": (
        "true adds a retained AWS::Logs::LogGroup /aws/lambda/<function> to the eks stack "
        "(kubectl provider handler and its onEvent function) and to the hyperpod stack "
        "(BucketDeployment function); where those functions have run, Lambda already "
        "created the groups and the deployment fails with 'already exists'."
    ),
    "@aws-cdk/aws-lambda:recognizeLayerVersion": (
        "true reverses the Layers of the kubectl provider handler in the eks stack (kubectl "
        "layer before the AWS CLI layer): a function update that changes which layer wins "
        "in /opt, for no gain."
    ),
    "@aws-cdk/core:enableAdditionalMetadataCollection": (
        "true widens the usage data in the AWS::CDK::Metadata resource of every template "
        "`cdk synth` writes (the network stack's Analytics grows from about 0.7 to 6.4 kB "
        "of construct property keys and values); the project opts out of CDK telemetry "
        "(Makefile: CDK_DISABLE_CLI_TELEMETRY), and with false the CLI's templates stay "
        "byte-identical. The snapshots omit that resource, so they do not show it."
    ),
}


@functools.cache
def recommended_by_cdk_init() -> dict[str, Any]:
    """The context `cdk init` writes for the installed aws-cdk-lib (read once: finding it
    means decompressing most of a 38 MB bundle; callers only read it)."""
    spec = importlib.util.find_spec("aws_cdk")
    assert spec is not None and spec.submodule_search_locations
    version = importlib.metadata.version("aws-cdk-lib")
    bundle = (
        Path(next(iter(spec.submodule_search_locations)))
        / "_jsii"
        / f"aws-cdk-lib@{version}.jsii.tgz"
    )
    with tarfile.open(bundle, "r:gz") as archive:
        for member in archive:
            if member.name == "package/recommended-feature-flags.json":
                data = archive.extractfile(member)
                assert data is not None
                flags: dict[str, Any] = json.load(data)
                return flags
    raise AssertionError(f"no recommended-feature-flags.json in {bundle}")


def feature_flag_report(outdir: Path) -> dict[str, dict[str, Any]]:
    """Name -> {recommendedValue, unconfiguredBehavesLike, ...} for every flag the library
    knows, from the report an empty App writes (what the CLI reads)."""
    use_bundled_node()
    import aws_cdk as cdk

    cdk.App(outdir=str(outdir)).synth()
    manifest = json.loads((outdir / "manifest.json").read_text())
    reports = [
        artifact["properties"]["flags"]
        for artifact in manifest["artifacts"].values()
        if artifact["type"] == "cdk:feature-flag-report"
    ]
    assert len(reports) == 1, "aws-cdk-lib wrote no feature-flag report"
    flags: dict[str, dict[str, Any]] = reports[0]
    return flags


def reported_as_unconfigured(
    context: dict[str, Any], report: dict[str, dict[str, Any]]
) -> list[str]:
    """The CLI's rule: unset, and the unconfigured behaviour (false when the library names
    none) differs from the recommended value."""
    return sorted(
        name
        for name, info in report.items()
        if name not in context
        and (info.get("unconfiguredBehavesLike") or {}).get("v2", False)
        != info.get("recommendedValue")
    )


def non_recommended(context: dict[str, Any], recommended: dict[str, Any]) -> set[str]:
    return {
        name
        for name, value in context.items()
        if name in recommended and value != recommended[name]
    }


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return feature_flag_report(tmp_path_factory.mktemp("feature-flags"))


def test_every_flag_cdk_init_writes_is_decided_in_cdk_json() -> None:
    missing = sorted(set(recommended_by_cdk_init()) - set(cdk_json_context()))
    assert missing == [], f"cdk.json does not set {missing}: add each with a deliberate value"


def test_cli_would_report_no_unconfigured_flag(report: dict[str, dict[str, Any]]) -> None:
    unconfigured = reported_as_unconfigured(cdk_json_context(), report)
    assert unconfigured == [], (
        f"`cdk synth` would report {len(unconfigured)} unconfigured feature flags: {unconfigured}"
    )


def test_every_non_recommended_value_has_a_reason(report: dict[str, dict[str, Any]]) -> None:
    recommended = {
        **recommended_by_cdk_init(),
        **{
            name: info["recommendedValue"]
            for name, info in report.items()
            if "recommendedValue" in info
        },
    }
    deviating = non_recommended(cdk_json_context(), recommended)
    assert sorted(deviating - set(NON_RECOMMENDED)) == [], "give each a reason in NON_RECOMMENDED"
    assert sorted(set(NON_RECOMMENDED) - deviating) == [], (
        "stale reasons: these flags are unset or at their recommended value"
    )


def test_the_checks_catch_a_missing_flag_and_a_missing_reason(
    report: dict[str, dict[str, Any]],
) -> None:
    """The helpers above, on a context that sets every flag to its recommended value, so a
    change in the library's report format cannot make the checks pass vacuously."""
    recommended = recommended_by_cdk_init()
    complete = {name: info.get("recommendedValue") for name, info in report.items()}
    flag = "@aws-cdk/aws-s3:publicAccessBlockedByDefault"
    assert recommended[flag] is True
    assert reported_as_unconfigured(complete, report) == []
    without = {name: value for name, value in complete.items() if name != flag}
    assert reported_as_unconfigured(without, report) == [flag]
    assert non_recommended({**recommended, flag: False}, recommended) == {flag}
