"""PyTorch peer in the style of torchbeast: a Python loop over time under no_grad."""

import torch
import torch.nn.functional as F

RHO_BAR = C_BAR = PG_RHO_BAR = 1.0
BASELINE_COST = 0.5
ENTROPY_COST = 0.01
# One intra-op thread: with PyTorch's default (2 here) every op over more than
# ~32k elements starts an OpenMP parallel region, and on this shared 2-core VM
# that made the loop 15-50x slower (T=300, B=256: 120 ms vs 4 ms per call).
torch.set_num_threads(1)

LOGITS_KEYS = ("behaviour_logits", "target_logits", "actions", "discounts",
               "rewards", "values", "bootstrap_value")


@torch.no_grad()
def vtrace(log_rhos, discounts, rewards, values, bootstrap_value):
    rhos = torch.exp(log_rhos)
    clipped_rhos = torch.clamp(rhos, max=RHO_BAR)
    cs = torch.clamp(rhos, max=C_BAR)
    values_tp1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_tp1 - values)
    acc = torch.zeros_like(bootstrap_value)
    result = []
    for t in range(discounts.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        result.append(acc)
    result.reverse()
    vs = torch.stack(result) + values
    vs_tp1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
    pg_advantages = torch.clamp(rhos, max=PG_RHO_BAR) * (rewards + discounts * vs_tp1 - values)
    return vs, pg_advantages


def _action_log_probs(logits, actions):
    return F.log_softmax(logits, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def learner_step(behaviour_logits, target_logits, actions, discounts, rewards, values,
                 bootstrap_value):
    """logits -> log-probs -> V-trace -> IMPALA loss -> d loss / d (logits, values)."""
    target_logits = target_logits.detach().requires_grad_()
    values = values.detach().requires_grad_()
    target_log_probs = F.log_softmax(target_logits, dim=-1)
    taken_log_probs = target_log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    log_rhos = taken_log_probs - _action_log_probs(behaviour_logits, actions)
    vs, pg_advantages = vtrace(log_rhos, discounts, rewards, values, bootstrap_value)
    pg_loss = -(taken_log_probs * pg_advantages).sum()
    baseline_loss = 0.5 * ((vs - values) ** 2).sum()
    entropy = -(target_log_probs.exp() * target_log_probs).sum()
    loss = pg_loss + BASELINE_COST * baseline_loss - ENTROPY_COST * entropy
    grad_logits, grad_values = torch.autograd.grad(loss, [target_logits, values])
    return loss, grad_logits, grad_values


def _tensors(inputs, keys):
    return [torch.from_numpy(inputs[k]).long() if k == "actions" else torch.from_numpy(inputs[k])
            for k in keys]


def build_importance_weights(name, inputs):
    args = _tensors(inputs, ("log_rhos", "discounts", "rewards", "values", "bootstrap_value"))
    return lambda: vtrace(*args)


def build_learner_step(name, inputs):
    args = _tensors(inputs, LOGITS_KEYS)
    return lambda: learner_step(*args)


def preload(name):
    """Nothing to import lazily here."""


def to_numpy(outputs):
    return [tensor.detach().numpy() for tensor in outputs]


BUILDERS = {"importance_weights": build_importance_weights, "learner_step": build_learner_step}
