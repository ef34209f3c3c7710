"""HTTP basic authentication for the standalone dashboard (``create_app(basic_auth=
"user:password")``, ``lowkiq web --basic-auth``, env ``LOWKIQ_WEB_BASIC_AUTH``).

Both parts are compared in constant time, and both always, so a reply's timing tells
nothing of either; a refusal is a 401 with ``WWW-Authenticate``.  The password is
never logged nor shown in an error.  Serve it over HTTPS (a proxy in front): basic
auth sends the password with every request.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass, field

from flask import Response, request

from lowkiq.errors import ConfigurationError

#: The environment variable ``create_app`` and ``lowkiq web`` read ``user:password`` from.
ENV = "LOWKIQ_WEB_BASIC_AUTH"
#: The realm the browser shows in its prompt.
REALM = "lowkiq"


@dataclass(frozen=True)
class Credentials:
    """The one user name and password the dashboard takes."""

    user: str
    password: str = field(repr=False)

    @classmethod
    def parse(cls, value: str, source: str = ENV) -> Credentials:
        """``user:password`` (the password may hold colons); a bad value raises
        :class:`ConfigurationError` naming ``source``, not the value."""
        user, colon, password = value.partition(":")
        if not colon or not user or not password:
            raise ConfigurationError(
                f"{source} must be user:password, both non-empty (the value is not shown)"
            )
        return cls(user, password)

    def accepts(self, user: str, password: str) -> bool:
        """Whether ``user`` and ``password`` are these, compared in constant time."""
        user_ok = hmac.compare_digest(user.encode(), self.user.encode())
        password_ok = hmac.compare_digest(password.encode(), self.password.encode())
        return user_ok & password_ok


def guard(credentials: Credentials) -> Callable[[], Response | None]:
    """A ``before_request`` hook answering 401 to a request without ``credentials``."""

    def require_credentials() -> Response | None:
        auth = request.authorization
        if (
            auth is not None
            and auth.type == "basic"
            and credentials.accepts(auth.username or "", auth.password or "")
        ):
            return None
        return Response(
            "Authentication required.\n",
            401,
            {"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'},
            mimetype="text/plain",
        )

    return require_credentials
