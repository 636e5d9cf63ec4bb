"""Training a small byte-level BPE tokenizer with a ChatML chat template (Qwen's format).

For demos and tests, where no pretrained tokenizer can be downloaded. The result is saved
with ``save_pretrained``, so ``transformers.AutoTokenizer.from_pretrained(dir)`` loads it
(as a ``PreTrainedTokenizerFast``) with its chat template, eos and pad tokens.
"""

from __future__ import annotations

# Qwen's ChatML turns: <|im_start|>role\ncontent<|im_end|>\n; the reply starts after the
# generation prompt "<|im_start|>assistant\n" and ends with <|im_end|> (the eos token).
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
PAD, START, END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"


def train_chat_tokenizer(texts, vocab_size: int = 512, split_digits: bool = True):
    """Train a byte-level BPE tokenizer on ``texts`` and give it a ChatML template.

    Args:
        texts: an iterable of training strings.
        vocab_size: target vocabulary size (256 byte tokens + merges + 3 special tokens).
        split_digits: make every digit its own pre-token (as Qwen does), which keeps
            numbers digit by digit: far easier for a small model to do arithmetic on.

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` with ``chat_template``, ``eos_token``
        ``<|im_end|>`` and ``pad_token`` ``<|endoftext|>``.

    Example:
        >>> tok = train_chat_tokenizer(["What is 2+3?", "5"], vocab_size=300)
        >>> tok.save_pretrained("runs/tok")
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r"\d"), behavior="isolated"), byte_level]
        if split_digits else [byte_level])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[PAD, START, END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=END, pad_token=PAD,
        additional_special_tokens=[START], chat_template=CHATML_TEMPLATE,
        model_max_length=1 << 20, clean_up_tokenization_spaces=False)

