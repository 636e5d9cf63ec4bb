"""Genesis data-parallel training over NCCL: placeholder until genesis-distributed is written."""
