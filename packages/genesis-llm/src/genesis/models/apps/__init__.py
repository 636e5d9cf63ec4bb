"""Command-line apps of genesis-llm and the pieces they are built from.

- ``chat_data``   reading chat JSONL (``{"messages": [{"role", "content"}]}``), errors by line
- ``chat_tokens`` a conversation -> token ids and labels (loss on assistant tokens only)
- ``packing``     examples -> fixed-length rows; plain text -> packed causal-LM blocks
- ``sft_data``    the dataset a run trains on: files -> rows -> train/eval split -> batches
- ``runtime``     rank/world size, device and precision of a run (the only place that knows)
- ``checkpoint``  saving and restoring a run exactly (weights, optimizer, schedule, RNG, log)
- ``training_log`` the JSON log and the loss-curve PNG
- ``sft``         the fine-tuning loop (``genesis-sft``)
- ``chat``        interactive chat (``genesis-chat``)
- ``model_dir``   loading a model directory (weights + tokenizer) with clear errors, and
                  saving a tokenizer atomically
- ``cli_help``    the ``--help`` layout of the apps (defaults shown)
"""
