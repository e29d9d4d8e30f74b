"""Every row of the add-on table (config/addons.py) is created by exactly one stack, the one
it names, and every row with a service account gets its pod identity there: checked over the
synthesized templates of every environment, and the check itself over planted tables."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

import pytest

from config.addons import ADDONS, Addon, AddonIdentity, ServiceAccount
from config.names import STACK_UNITS
from tests.support import ENVIRONMENTS, SYNTH_GROUP, SynthResult

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)


def placement_errors(
    table: Mapping[str, Addon],
    created: Mapping[str, Sequence[str]],
    associations: Mapping[str, Collection[tuple[str, str]]],
) -> list[str]:
    """What breaks the table's placement. `created`: the unit of every stack built -> the
    add-ons its template creates; `associations`: unit -> (namespace, service account) of
    its pod identity associations."""
    errors = []
    counts = Counter(name for names in created.values() for name in names)
    for unit, names in created.items():
        for name in names:
            row = table.get(name)
            if row is None:
                errors.append(f"{unit} creates {name}, which the table does not list")
            elif row.stack != unit:
                errors.append(f"{unit} creates {name}, which the table places in {row.stack}")
    for name, count in counts.items():
        if count > 1:
            errors.append(f"{name} is created {count} times")
    for name, row in table.items():
        if row.stack not in created:
            continue  # that stack is not built in this environment
        if name not in created[row.stack]:
            errors.append(f"{name}: the table places it in {row.stack}, which does not create it")
            continue
        account = row.service_account
        if account and (account.namespace, account.name) not in associations[row.stack]:
            errors.append(f"{name}: no pod identity for {account.namespace}/{account.name}")
    return errors


def _synthesized(result: SynthResult) -> tuple[dict[str, list[str]], dict[str, set]]:
    created: dict[str, list[str]] = {}
    associations: dict[str, set[tuple[str, str]]] = {}
    for short in result.stacks:
        unit = STACK_UNITS[short]
        created[unit] = [
            a["Properties"]["AddonName"]
            for a in result.resources(short, "AWS::EKS::Addon").values()
        ]
        associations[unit] = {
            (a["Properties"]["Namespace"], a["Properties"]["ServiceAccount"])
            for a in result.resources(short, "AWS::EKS::PodIdentityAssociation").values()
        }
    return created, associations


def test_every_row_is_created_by_its_stack_with_its_identity(env):
    assert placement_errors(ADDONS, *_synthesized(env)) == []


def test_every_row_is_created_in_some_environment(synth_all):
    created = {
        addon
        for env_name in ENVIRONMENTS
        for addons in _synthesized(synth_all[env_name])[0].values()
        for addon in addons
    }
    assert created == set(ADDONS)


# --------------------------------------------------------------------------- the check


def _row(name: str, stack: str, account: ServiceAccount | None = None) -> Addon:
    return Addon(
        name=name,
        version="v1.0.0-eksbuild.1",
        minimum=(1, 0, 0),
        stack=stack,  # type: ignore[arg-type]
        identity=None
        if account is None
        else AddonIdentity(
            service_account=account,
            construct_id=name.title(),
            description=f"{name}: its one permission",
            actions=("example:Describe",),
            resources="*",
        ),
    )


ACCOUNT = ServiceAccount(namespace="ns", name="controller")
TABLE = {
    "boot": _row("boot", "eks"),
    "operator": _row("operator", "cluster-addons", ACCOUNT),
}
CREATED = {"network": [], "eks": ["boot"], "cluster-addons": ["operator"]}
ASSOCIATIONS = {"network": set(), "eks": set(), "cluster-addons": {("ns", "controller")}}


def test_the_check_passes_a_table_its_stacks_create():
    assert placement_errors(TABLE, CREATED, ASSOCIATIONS) == []
    # A stack this environment does not build creates nothing to check.
    table = {**TABLE, "collector": _row("collector", "observability")}
    assert placement_errors(table, CREATED, ASSOCIATIONS) == []


def test_a_row_placed_in_a_stack_that_does_not_create_it_fails():
    table = {**TABLE, "planted": _row("planted", "eks")}
    (error,) = placement_errors(table, CREATED, ASSOCIATIONS)
    assert "planted" in error and "eks" in error


def test_a_row_created_by_another_stack_or_twice_fails():
    created = {**CREATED, "network": ["boot"]}
    errors = placement_errors(TABLE, created, ASSOCIATIONS)
    assert any("network creates boot" in e for e in errors), errors
    assert any("boot is created 2 times" in e for e in errors), errors


def test_a_row_with_a_service_account_and_no_pod_identity_fails():
    associations = {**ASSOCIATIONS, "eks": {("ns", "controller")}, "cluster-addons": set()}
    (error,) = placement_errors(TABLE, CREATED, associations)
    assert "operator" in error and "ns/controller" in error
