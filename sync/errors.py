"""The exception tree of policy-sync, public (see :mod:`sync._errors` for the drawing).

Front ends (HTTP, WebSocket, the binary protocol, the CLIs) map these to their own codes.
"""

from ._errors import *  # noqa: F403
from ._errors import __all__ as __all__
