"""Fails on import, as a plugin does when its native library is missing."""

raise ImportError("libtoydriver.so.1: cannot open shared object file")
