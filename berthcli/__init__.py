"""`berth`: the command line for Berth's REST API, for people and CI pipelines.

It talks HTTP only (never imports Django) so it installs anywhere Python and
`requests` do. See docs/cli.md.
"""

__version__ = "0.1.0"
