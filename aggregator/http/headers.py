"""Response headers every answer carries: nothing is cached (but what :func:`cacheable` marks, the
same for everyone and no secret), and a page cannot be framed, sniffed or made to run script it
did not ship.

The dashboard's one inline script (the reload in ``base.html``) runs under a per-response nonce;
everything else it loads is its own stylesheet and icon. Estimates and schemas can be read
behind a token, so no response may be kept by a browser or a shared cache.
"""

from __future__ import annotations

import secrets

from flask import Flask, Response, g

# default-src 'none': anything not listed below is refused, including plugins and connections.
_POLICY = ("default-src 'none'; style-src 'self'; img-src 'self'; script-src 'nonce-{nonce}'; "
           "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
# What is not a page (JSON, CSV, text) runs no script at all: no nonce to make.
_NOT_A_PAGE = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
_ALWAYS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}


def script_nonce() -> str:
    """This response's nonce for an inline ``<script>`` (made on first use)."""
    if "script_nonce" not in g:
        g.script_nonce = secrets.token_urlsafe(16)
    nonce: str = g.script_nonce
    return nonce


def cacheable(response: Response, seconds: int) -> Response:
    """Let browsers and shared caches keep ``response`` for ``seconds``: only for an answer that is
    the same for everyone, public, and behind no token (the Oblivious HTTP keys)."""
    response.headers["Cache-Control"] = f"max-age={seconds}"
    g.cacheable = True
    return response


def not_a_page() -> dict[str, str]:
    """What :func:`init_app`'s hook adds to an answer that is neither a page nor cacheable (JSON)."""
    return {**_ALWAYS, "Content-Security-Policy": _NOT_A_PAGE}


def init_app(app: Flask) -> None:
    app.jinja_env.globals["script_nonce"] = script_nonce

    @app.after_request
    def secure(response: Response) -> Response:
        headers = (not_a_page() if response.mimetype != "text/html"
                   else {**_ALWAYS, "Content-Security-Policy": _POLICY.format(nonce=script_nonce())})
        if g.get("cacheable", False):
            del headers["Cache-Control"]  # the answer's own, set by cacheable()
        response.headers.update(headers)
        return response
