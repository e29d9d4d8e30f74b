"""The numeric user and group of each team: they own the team's directories on the shared
file system (config/teams.py), its pods run as them (hpctl/job/render.py) and its namespace's
admission policy admits no other (platform_constructs/team_admission.py). Below the schema,
which refuses two teams of one group before anything is synthesized."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final

# Team groups: a hash of the team's name into [TEAM_GID_BASE, TEAM_GID_BASE + TEAM_GID_SPAN).
# Derived from the name, not the team's position in the config, so adding or removing a team
# never renumbers another team's group (its directories keep their owner), and `hpctl job
# render` knows a team's group without the environment's config. The range starts above
# system groups (< 1000), login users (1000-60000), the training image's 10001, nobody
# (65534) and systemd's dynamic users (61184-65519), and stays well inside 32 bits.
TEAM_GID_BASE: Final = 200_000
TEAM_GID_SPAN: Final = 1_000_000


def team_gid(team: str) -> int:
    """The numeric group that owns `team`'s directories and that its pods carry."""
    digest = hashlib.sha256(team.encode()).digest()
    return TEAM_GID_BASE + int.from_bytes(digest[:8], "big") % TEAM_GID_SPAN


def team_uid(team: str) -> int:
    """The numeric user `team`'s pods run as and that owns its directories: the number of
    its group (a user-private group), so one hash names both and no other team's."""
    return team_gid(team)


def team_gids(teams: Iterable[str]) -> dict[str, int]:
    """`team_gid` of each team; two teams that hash to one group would share directories,
    so that is refused (rename one)."""
    gids: dict[str, int] = {}
    for team in teams:
        gid = team_gid(team)
        clash = [other for other, taken in gids.items() if taken == gid]
        if clash:
            raise ValueError(
                f"teams {clash[0]} and {team} hash to the same group {gid}; rename one"
            )
        gids[team] = gid
    return gids
