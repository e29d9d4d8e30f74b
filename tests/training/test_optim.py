from __future__ import annotations

import itertools
import math

import pytest
import torch

from training.config import OptimConfig
from training.optim import build_optimizer, lr_multiplier


def test_warmup_then_cosine_to_floor() -> None:
    kw = dict(warmup_steps=10, total_steps=110, min_lr_ratio=0.1)
    warm = [lr_multiplier(s, **kw) for s in range(10)]
    assert warm == sorted(warm) and warm[0] == pytest.approx(1 / 11)
    assert lr_multiplier(10, **kw) == pytest.approx(1.0)
    assert lr_multiplier(60, **kw) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_multiplier(110, **kw) == pytest.approx(0.1)
    assert lr_multiplier(500, **kw) == pytest.approx(0.1)
    decay = [lr_multiplier(s, **kw) for s in range(10, 111)]
    assert all(a >= b for a, b in itertools.pairwise(decay))


def test_no_warmup() -> None:
    assert lr_multiplier(0, warmup_steps=0, total_steps=10, min_lr_ratio=0.0) == pytest.approx(1.0)
    assert lr_multiplier(5, warmup_steps=0, total_steps=10, min_lr_ratio=0.0) == pytest.approx(0.5)


def test_scheduler_state_resumes_same_lrs() -> None:
    cfg = OptimConfig(lr=1.0, warmup_steps=3, min_lr_ratio=0.0)
    model = torch.nn.Linear(4, 4)
    opt, sched = build_optimizer(model, cfg, total_steps=20)
    lrs = []
    for _ in range(12):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    opt2, sched2 = build_optimizer(model, cfg, total_steps=20)
    replay_opt, replay = build_optimizer(model, cfg, total_steps=20)
    for _ in range(5):
        replay_opt.step()
        replay.step()
    opt2.load_state_dict(replay_opt.state_dict())
    sched2.load_state_dict(replay.state_dict())
    resumed = []
    for _ in range(7):
        opt2.step()
        sched2.step()
        resumed.append(opt2.param_groups[0]["lr"])
    assert resumed == lrs[5:]
    assert lrs[-1] == pytest.approx(0.5 * (1 + math.cos(math.pi * 9 / 17)))


def test_norm_weights_not_decayed() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4, bias=False), torch.nn.RMSNorm(4))
    opt, _ = build_optimizer(model, OptimConfig(weight_decay=0.3), total_steps=5)
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    assert decayed == {id(model[0].weight)}
