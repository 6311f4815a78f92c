"""Staff review elicitations (pending ones, and what became of the others) in a Flask app.

Flask has no admin site to plug into, so this is a small blueprint of its own: a list of the
questions tools asked, filtered by status and mode and searchable, each question's page
(read-only), and a button that completes a URL-mode elicitation, which notifies the client as
:func:`mcp_flask.complete_elicitation` does. Who may see it is the application's decision::

    from flask_login import current_user
    from mcp_flask.admin import admin_blueprint

    app.register_blueprint(
        admin_blueprint(lambda: current_user.is_authenticated and current_user.is_admin),
        url_prefix="/mcp-admin",
    )

The check runs before every page: ``True`` lets the request in, ``False`` answers 403, and a
response (a redirect to the login page, say) is sent as it is. The completion button is a
POST with a token kept in Flask's session (the app needs a ``SECRET_KEY``).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

from flask import (
    Blueprint,
    Response,
    abort,
    current_app,
    flash,
    redirect,
    render_template_string,
    request,
    session,
    url_for,
)
from markupsafe import Markup
from sqlalchemy import false, func, or_, select
from sqlalchemy.orm import Session
from werkzeug.wrappers import Response as BaseResponse

from mcp_common.elicitation import complete_in_store
from mcp_common.security import check_request
from mcp_common.store import ELICITATION_STATUSES, OPEN_STATUSES, SQLITE_LIKE_LIMIT, overdue, sqlite_cannot_search
from mcp_flask.models import MCPElicitation

Permission = Callable[[], "bool | BaseResponse"]
"""Whether the current request may see the panel: ``True``, ``False`` (403) or a response."""

PAGE_SIZE = 50
"""Questions per page of the list."""

_TOKEN_KEY = "mcp_admin_token"
_MODES = ("form", "url")
_NO_TEXT = "(no text)"

_STYLE = """\
/* A stylesheet, not an inline <style>: a Content-Security-Policy without 'unsafe-inline'
   (Flask-Talisman's default, say) would refuse the latter. */
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#222;background:#f6f7f9}
header{background:#264b5d;color:#fff;padding:10px 24px}header a{color:#fff;text-decoration:none}
main{padding:16px 24px;max-width:1200px}h1{font-size:20px;margin:8px 0 16px}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #e3e6ea;vertical-align:top}
th{background:#eef1f4;font-weight:600}td.q{max-width:520px}table.fields th{width:220px}.none{color:#888}
td.q,td.long,table.fields td{overflow-wrap:anywhere}td.tool{min-width:8em}
nav.filters a{margin-right:10px}nav.filters a.on{font-weight:700;text-decoration:none;color:#222}
nav.filters{margin-bottom:8px}form.search{margin:12px 0}
.status{padding:1px 7px;border-radius:9px;background:#e3e6ea;font-size:12px}
.status.pending{background:#fde9b6}.status.accepted,.status.completed{background:#cdebd3}
.status.declined,.status.cancelled,.status.expired{background:#f2d3d3}
pre{background:#f0f2f4;padding:8px;margin:0;white-space:pre-wrap;word-break:break-word}
.flash{background:#cdebd3;padding:8px 12px;margin-bottom:12px}.empty{padding:16px;background:#fff}
button{padding:6px 14px}
form.complete{margin-top:16px}
"""

_LAYOUT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }} · MCP elicitations</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="{{ url_for('.stylesheet') }}"></head>
<body><header><a href="{{ url_for('.index') }}">MCP elicitations</a></header><main>
{% for message in get_flashed_messages() %}<div class="flash">{{ message }}</div>{% endfor %}
{{ body }}
</main></body></html>"""

_INDEX = """<h1>{{ total }} elicitation{{ '' if total == 1 else 's' }}</h1>
<nav class="filters">Status:
<a href="{{ link(status=None, page=None) }}" class="{{ 'on' if not status }}">all</a>
{% for s in statuses %}
<a href="{{ link(status=s, page=None) }}" class="{{ 'on' if s == status }}">{{ s }}</a>
{% endfor %}
</nav>
<nav class="filters">Mode:
<a href="{{ link(mode=None, page=None) }}" class="{{ 'on' if not mode }}">all</a>
{% for m in modes %}<a href="{{ link(mode=m, page=None) }}" class="{{ 'on' if m == mode }}">{{ m }}</a>{% endfor %}
</nav>
<form class="search" method="get">
{% if status %}<input type="hidden" name="status" value="{{ status }}">{% endif %}
{% if mode %}<input type="hidden" name="mode" value="{{ mode }}">{% endif %}
<input type="search" name="q" value="{{ q }}" placeholder="question, tool, elicitation id, principal" size="40">
<button type="submit">Search</button></form>
{% if rows %}
<table><thead><tr><th>Created (UTC)</th><th>Tool</th><th>Question</th><th>Status</th>
<th>Elicitation id</th><th>Principal</th></tr></thead><tbody>
{% for row in rows %}<tr><td>{{ when(row.created) }}</td><td class="long tool">{{ row.tool or '' }}</td>
<td class="q"><a href="{{ url_for('.detail', record_id=row.id) }}">{% if row.message.strip() %}
{{- row.message|truncate(80, True, '…', 0) }}{% else %}<span class="none">{{ no_text }}</span>{% endif %}</a></td>
<td><span class="status {{ row.status }}">{{ row.status }}</span></td>
<td class="long">{{ row.elicitation_id or '' }}</td><td class="long">{{ row.principal or '' }}</td></tr>{% endfor %}
</tbody></table>
<p>{% if page > 1 %}<a href="{{ link(page=page - 1) }}">« newer</a>{% endif %}
Page {{ page }} of {{ pages }}
{% if page < pages %}<a href="{{ link(page=page + 1) }}">older »</a>{% endif %}</p>
{% else %}<p class="empty">No elicitation matches.</p>{% endif %}"""

_DETAIL = """<h1>{% if row.message.strip() %}{{ row.message|truncate(120, True, '…', 0) }}
{%- else %}<span class="none">{{ no_text }}</span>{% endif %}</h1>
<table class="fields"><tbody>
{% for label, value, preformatted in fields %}<tr><th>{{ label }}</th>
<td>{% if not value %}<span class="none">—</span>
{% elif preformatted %}<pre>{{ value }}</pre>{% else %}{{ value }}{% endif %}</td></tr>
{% endfor %}
</tbody></table>
{% if completable %}
<form class="complete" method="post" action="{{ url_for('.complete', record_id=row.id) }}">
<input type="hidden" name="token" value="{{ token }}">
<button type="submit">Mark completed (notifies the client)</button></form>
{% elif late %}<p>Expired at {{ late }} UTC: it can no longer be completed.</p>
{% endif %}
<p><a href="{{ url_for('.index') }}">« all elicitations</a></p>"""


def admin_blueprint(permission: Permission, *, name: str = "mcp_admin") -> Blueprint:
    """The review panel, to register on the app under a URL prefix of its choice.

    :param permission: called before every page (see the module's documentation).
    :param name: the blueprint's name (``url_for(f"{name}.index")``).
    """
    if not callable(permission):
        raise TypeError(
            "admin_blueprint() needs a permission check, a function of no arguments deciding "
            f"whether the current request may see the panel; got {permission!r}."
        )
    blueprint = Blueprint(name, __name__)

    @blueprint.url_value_preprocessor
    def _exempt_from_csrf(_endpoint: str | None, _values: dict[str, Any] | None) -> None:
        # Flask-WTF's CSRFProtect would refuse the completion form: it carries this panel's own
        # token instead of Flask-WTF's. Told on each of the panel's requests, on the app that
        # serves it: this hook runs before every before_request function (CSRFProtect's check
        # is one), so the exemption holds on every app the panel is registered on, whether
        # CSRFProtect was set up on it before or after the panel (at registration, the later
        # one is not there yet).
        csrf = current_app.extensions.get("csrf")
        if csrf is not None and hasattr(csrf, "exempt"):
            csrf.exempt(blueprint)

    @blueprint.before_request
    def _check_permission() -> BaseResponse | None:
        from mcp_flask.extension import get_state

        # DNS rebinding: another site's page, its name pointed at this server, is same-origin
        # with it and sends its own name as Host, from a browser a check on the address (or a
        # cookie for that name) lets in. The panel admits the hosts the MCP endpoint admits, as
        # Django's ALLOWED_HOSTS guards its admin (and with its 400).
        if check_request(get_state().config, {"host": request.host}, 0, log=True) is not None:
            abort(400, "Invalid Host header.")
        allowed = permission()
        # Werkzeug's own responses too (werkzeug.utils.redirect): Flask's is a subclass.
        if isinstance(allowed, BaseResponse):
            return allowed
        if allowed is not True:
            abort(403)
        return None

    @blueprint.after_request
    def _refuse_framing(response: BaseResponse) -> BaseResponse:
        # Clickjacking: another site must not frame the completion button under one of its
        # own. (Django's admin has XFrameOptionsMiddleware; a Flask app nothing of the kind.)
        response.headers.setdefault("X-Frame-Options", "DENY")
        return response

    @blueprint.after_request
    def _not_stored(response: BaseResponse) -> BaseResponse:
        # Users' answers (a name, an address): a page kept in the browser's cache came back on
        # Back after staff signed out, and a shared cache could keep it for others. Django's
        # admin pages are never_cache.
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    blueprint.add_url_rule("/panel.css", "stylesheet", _stylesheet)
    blueprint.add_url_rule("/", "index", _index)
    blueprint.add_url_rule("/<record_id>/", "detail", _detail)
    blueprint.add_url_rule("/<record_id>/complete", "complete", _complete, methods=["POST"])
    return blueprint


@contextlib.contextmanager
def _session() -> Iterator[Session]:
    """A session on the store's database. On one in memory (one connection that every thread
    shares) its reads take their turn with the store's calls: run inside another thread's
    write, their end would roll that write back (see mcp_common.store.serial_writes)."""
    from mcp_flask.extension import get_state

    store = get_state().store
    lock = store._write_lock
    with lock.for_reads() if lock is not None else contextlib.nullcontext(), Session(store.engine) as s:
        yield s


def _page(*, title: str, source: str, **context: Any) -> str:
    # A question asked with a blank message (the SDK allows one) still has a link to open it
    # by, and a heading: its text is those.
    body = Markup(render_template_string(_escaped(source), **context, no_text=_NO_TEXT))
    return render_template_string(_escaped(_LAYOUT), title=title, body=body)


def _escaped(source: str) -> str:
    # The pages show what tools and clients wrote, rendered in the app's Jinja environment:
    # an app whose own templates are not HTML may turn its autoescaping off, which must not
    # let their markup into the panel.
    return "{% autoescape true %}" + source + "{% endautoescape %}"


def _stylesheet() -> Response:
    return Response(_STYLE, mimetype="text/css")


def _index() -> str:
    from mcp_flask.extension import get_state

    status = request.args.get("status") or None
    mode = request.args.get("mode") or None
    q = (request.args.get("q") or "").strip()
    if status is not None and status not in ELICITATION_STATUSES:
        abort(400, f"Unknown status {status!r}: one of {', '.join(ELICITATION_STATUSES)}.")
    if mode is not None and mode not in _MODES:
        abort(400, f"Unknown mode {mode!r}: form or url.")
    try:
        page = max(1, int(request.args.get("page", "1")))
    except ValueError:
        abort(400, "page must be a whole number.")
    conditions = []
    if status is not None:
        conditions.append(MCPElicitation.status == status)
    if mode is not None:
        conditions.append(MCPElicitation.mode == mode)
    if "\x00" in q:
        # Nothing stored holds a NUL (PostgreSQL text cannot, and its driver refuses one).
        conditions.append(false())
    elif q:
        if sqlite_cannot_search(q) and get_state().engine.dialect.name == "sqlite":
            # SQLite would refuse the statement (a 500 page).
            abort(400, f"The search is too long: SQLite compares at most {SQLITE_LIKE_LIMIT} bytes.")
        pattern = "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        conditions.append(
            or_(
                *(
                    column.ilike(pattern, escape="\\")
                    for column in (
                        MCPElicitation.message,
                        MCPElicitation.tool,
                        MCPElicitation.elicitation_id,
                        MCPElicitation.principal,
                        MCPElicitation.id,
                    )
                )
            )
        )
    with _session() as s:
        total = s.scalar(select(func.count()).select_from(MCPElicitation).where(*conditions)) or 0
        # Past the end (a hand-edited URL): the last page, and an OFFSET the database accepts.
        pages = max(1, -(-total // PAGE_SIZE))
        page = min(page, pages)
        rows = list(
            s.scalars(
                select(MCPElicitation)
                .where(*conditions)
                .order_by(MCPElicitation.created.desc(), MCPElicitation.id.desc())
                .offset((page - 1) * PAGE_SIZE)
                .limit(PAGE_SIZE)
            )
        )
    args = {"status": status, "mode": mode, "q": q or None, "page": page if page > 1 else None}

    def link(**changes: Any) -> str:
        merged = {k: v for k, v in {**args, **changes}.items() if v is not None}
        return url_for(".index", **merged)

    return _page(
        title="Elicitations",
        source=_INDEX,
        rows=rows,
        total=total,
        page=page,
        pages=pages,
        status=status,
        mode=mode,
        q=q,
        statuses=ELICITATION_STATUSES,
        modes=_MODES,
        link=link,
        when=_when,
    )


def _pretty(value: str | None) -> str:
    """JSON text indented for reading."""
    if not value:
        return ""
    try:
        return json.dumps(json.loads(value), indent=2, ensure_ascii=False)
    except ValueError:
        return value


def _row(record_id: str) -> MCPElicitation | None:
    if "\x00" in record_id:  # no such id (PostgreSQL's driver refuses to look one up)
        return None
    with _session() as s:
        return s.get(MCPElicitation, record_id)


def _detail(record_id: str) -> str:
    row = _row(record_id)
    if row is None:
        abort(404)
    fields = [
        ("Status", row.status, False),
        ("Mode", row.mode, False),
        ("Question", row.message, False),
        ("Requested schema", _pretty(row.requested_schema), bool(row.requested_schema)),
        ("URL", row.url or "", False),
        ("Elicitation id", row.elicitation_id or "", False),
        ("Answer", _pretty(row.answer), bool(row.answer)),
        ("Detail", row.detail or "", False),
        ("Server", row.server_name, False),
        ("Tool", row.tool or "", False),
        ("Principal", row.principal or "", False),
        ("Legacy session", row.session_id or "", False),
        ("Request state (2026-07-28)", row.state_id or "", False),
        ("Created (UTC)", _when(row.created), False),
        ("Updated (UTC)", _when(row.updated), False),
        ("Expires (UTC)", _when(row.expires), False),
        ("Id", row.id, False),
    ]
    return _page(
        title=row.message[:60] if row.message.strip() else _NO_TEXT,
        source=_DETAIL,
        row=row,
        fields=fields,
        completable=_completable(row),
        # Still "pending" to the database until the heartbeat marks it: staff are told why
        # there is no button.
        late=_when(row.expires) if row.mode == "url" and _overdue(row) else None,
        token=_token(),
    )


def _when(moment: Any) -> str:
    return str(moment.strftime("%Y-%m-%d %H:%M:%S"))


def _completable(row: MCPElicitation) -> bool:
    # One still pending after its expiry is as good as expired (the heartbeat has not marked
    # it yet): the completion would expire it, not complete it.
    return row.mode == "url" and bool(row.elicitation_id) and row.status in OPEN_STATUSES and not _overdue(row)


def _overdue(row: MCPElicitation) -> bool:
    return overdue(row.status, row.expires.timestamp(), time.time())


def _refusal(row: MCPElicitation) -> str:
    """Why the question cannot be completed."""
    if row.mode == "url" and _overdue(row):
        return f"Not completed: this elicitation had expired at {_when(row.expires)} UTC."
    if row.mode == "url" and row.status == "expired":
        return "Not completed: this elicitation had expired."
    return f"Nothing to complete: this is a {row.mode} elicitation, {row.status}."


def _token() -> str:
    token = session.get(_TOKEN_KEY)
    if not isinstance(token, str):
        token = session[_TOKEN_KEY] = secrets.token_urlsafe(32)
    return token


def _complete(record_id: str) -> Response:
    from mcp_flask.extension import get_state

    expected = session.get(_TOKEN_KEY)
    sent = request.form.get("token", "")
    # As bytes: hmac.compare_digest raises on non-ASCII text, and the sender chose this one.
    if not isinstance(expected, str) or not hmac.compare_digest(sent.encode(), expected.encode()):
        abort(400, "The form's token is missing or stale: reload the page and try again.")
    row = _row(record_id)
    if row is None:
        abort(404)
    if not _completable(row):
        flash(_refusal(row))
    else:
        # The asker's rows with that id on that server only: another user who asked under the
        # same id has not done what this one did.
        moved, _ = complete_in_store(get_state().store, row.elicitation_id or "", row.server_name, row.principal)
        # Nothing moved: the question ended meanwhile (its expiry passed, and the completion
        # expired it; another worker completed it): said as it is now.
        flash(f"{len(moved)} elicitation(s) completed." if moved else _refusal(_row(record_id) or row))
    return redirect(url_for(".detail", record_id=record_id), code=303)
