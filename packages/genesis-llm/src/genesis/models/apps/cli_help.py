"""The ``--help`` layout shared by the command-line apps (``genesis-sft``, ``genesis-chat``)."""

from __future__ import annotations

import argparse


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each option's default, except for on/off switches (their name says
    what they do) and options whose default is "not set".

    Example::

        >>> parser = argparse.ArgumentParser(formatter_class=DefaultsHelpFormatter)
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or isinstance(action.default, bool):
            return action.help or ""
        return super()._get_help_string(action)
