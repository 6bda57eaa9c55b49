import sys

from shardkit.cli import script

sys.exit(script())
