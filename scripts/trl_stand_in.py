"""trl_stand_in.py — what the golden scripts that CALL TRL's trainer methods unbound share
(scripts/gen_objloss_goldens.py, scripts/gen_objective_goldens.py): an accelerator of one
process for the stand-in `self` those methods read. Dev-time only."""
import torch


class Acc:  # an accelerator of one process
    num_processes = 1
    device = torch.device("cpu")
    sync_gradients = True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x

    def unwrap_model(self, m):
        return m
