"""The one error the analysis raises for bad inputs."""

from __future__ import annotations


class AnalysisError(Exception):
    """A missing or corrupt input: the message names the file and what is wrong with it.

    One class on purpose: the CLI turns it into a one-line message and a non-zero exit,
    anything else is a bug and keeps its traceback.
    """
