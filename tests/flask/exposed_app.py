"""A Flask shop's existing views and its ``Order`` model (Flask-SQLAlchemy, Flask-Login users),
exposed as tools of one server (the app for ``test_flask_expose``)."""

from __future__ import annotations

import datetime as dt
import enum
import functools
import io
from collections.abc import Callable
from decimal import Decimal

from flask import (
    Blueprint,
    Flask,
    Request,
    Response,
    abort,
    current_app,
    g,
    redirect,
    render_template_string,
    request,
    send_file,
    url_for,
)
from flask.typing import ResponseReturnValue
from flask.views import MethodView
from flask_login import LoginManager, UserMixin, current_user, login_required, login_user
from flask_sqlalchemy import SQLAlchemy
from flask_wtf import FlaskForm
from mcp.server import MCPServer
from sqlalchemy import Enum, ForeignKey, Numeric, String, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from werkzeug.routing import BaseConverter
from wtforms import StringField
from wtforms.validators import DataRequired

from mcp_flask import MCP, model_tools, permission_required, view_tool
from mcp_flask.models import UTCDateTime


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)


class Status(enum.Enum):
    NEW = "new"
    PAID = "paid"
    SHIPPED = "shipped"
    CANCELLED = "cancelled"


class User(UserMixin, db.Model):  # type: ignore[name-defined,misc]
    __tablename__ = "shop_user"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(50), unique=True)
    role: Mapped[str] = mapped_column(String(20), default="customer")


class Order(db.Model):  # type: ignore[name-defined,misc]
    __tablename__ = "shop_order"

    id: Mapped[int] = mapped_column(primary_key=True)
    number: Mapped[str] = mapped_column(String(20), unique=True)
    customer: Mapped[str] = mapped_column(String(200))
    status: Mapped[Status] = mapped_column(Enum(Status, native_enum=False, length=16), default=Status.NEW)
    total: Mapped[Decimal] = mapped_column(Numeric(10, 2))
    placed: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("shop_user.id"))


def is_clerk() -> bool:
    return bool(current_user.is_authenticated and current_user.role == "clerk")


mcp = MCPServer("Exposed Flask shop")
shop = Blueprint("shop", __name__)
staff = Blueprint("staff", __name__, url_prefix="/staff")


@view_tool(mcp, arguments={"status": (str | None, None), "page": (int, 1)})
@shop.get("/orders")
def order_list() -> ResponseReturnValue:
    """The shop's orders, as its JSON API lists them."""
    query = select(Order.number).order_by(Order.number)
    if status := request.args.get("status"):
        query = query.where(Order.status == Status(status))
    return {
        "orders": list(db.session.scalars(query)),
        "page": request.args.get("page"),
        "user": current_user.name if current_user.is_authenticated else None,
        "path": request.path,
        "shop": g.shop_name,  # set by the app's before_request function
    }


@view_tool(mcp)
@shop.get("/orders/<number>")
@login_required
def order_page(number: str) -> ResponseReturnValue:
    """An order's page, for signed-in customers."""
    order = db.first_or_404(select(Order).where(Order.number == number))
    return (
        "<!doctype html><html><head><title>Order</title><style>h1 {color: red}</style>"
        "<script>var secret = 1;</script></head><body>"
        f"<h1>Order {order.number}</h1><p>Customer: {order.customer} &amp; co.</p>"
        f"<p>Status: {order.status.value.title()}</p></body></html>"
    )


@view_tool(mcp, method="POST", arguments={"reason": str})
@shop.post("/orders/<number>/cancel")
@login_required
def cancel_order(number: str) -> ResponseReturnValue:
    """Cancel an order (clerks only)."""
    if current_user.role != "clerk":
        abort(403)
    order = db.first_or_404(select(Order).where(Order.number == number))
    order.status = Status.CANCELLED
    db.session.commit()
    return {"number": order.number, "status": order.status.value, "reason": request.get_json()["reason"]}


# Routed for GET only: as a POST tool it is refused as a browser's POST would be (405).
view_tool(mcp, order_list, name="post_order_list", method="POST")


@view_tool(mcp, name="order_count")
class OrderCount(MethodView):
    """How many orders the shop has (a class-based view)."""

    def get(self) -> ResponseReturnValue:
        return {"count": db.session.scalar(select(func.count()).select_from(Order)), "path": request.path}


shop.add_url_rule("/orders/count", view_func=OrderCount.as_view("order_count"))
view_tool(mcp, OrderCount.as_view("order_count_view"), name="order_count_view")


@view_tool(mcp)
@shop.get("/files/<slug>")
def shop_file(slug: str) -> ResponseReturnValue:
    """One of the shop's files; its URL holds one path segment, which the view relies on."""
    return f"file {slug}", {"Content-Type": "text/plain"}


class FourDigitYearConverter(BaseConverter):
    """A custom converter whose ``to_url`` takes the year ``to_python`` makes, not its text."""

    regex = "[0-9]{4}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return "%04d" % value  # noqa: UP031  # a TypeError for text, as Django's documented one


class OrderConverter(BaseConverter):
    """An order number read as its order: 404 Not Found for one the shop does not have."""

    def to_python(self, value: str) -> Order:
        if value == "X-0":
            raise RuntimeError("database password is hunter2")  # the database failing
        return db.first_or_404(select(Order).where(Order.number == value))

    def to_url(self, value: Order | str) -> str:
        return value.number if isinstance(value, Order) else value


@view_tool(mcp)
@shop.get("/order-totals/<order:order>")
def order_total(order):  # type: ignore[no-untyped-def]  # no annotation: the tool takes the number
    """An order's total; its URL's converter loads the order."""
    return {"number": order.number, "total": str(order.total)}


@view_tool(mcp)
@shop.get("/receipts/<yyyy:year>/<int:number>/<uuid:token>")
def receipt(year, number, token):  # type: ignore[no-untyped-def]  # no annotations, as Flask's tutorial writes them
    """A receipt: its URL's converters make the view's values, which the tool takes as text."""
    return {
        "year": year,
        "number": number,
        "token": str(token),
        "types": [type(v).__name__ for v in (year, number, token)],
    }


branches = Blueprint("branches", __name__, url_prefix="/branches/<branch>")


@branches.url_value_preprocessor
def pull_branch(endpoint: str | None, values: dict[str, object] | None) -> None:
    """Flask's documented URL processor: the branch goes to ``g``, not to the views."""
    g.branch = (values or {}).pop("branch", None)


@view_tool(mcp, path_arguments={"branch": str, "shelf": int})
@branches.get("/shelves/<int:shelf>")
def branch_shelf(shelf: int) -> ResponseReturnValue:
    """A shelf of a branch, which its blueprint's URL processor reads from the URL."""
    return {"branch": g.branch, "shelf": shelf}


@view_tool(mcp)
@shop.get("/whoami")
async def whoami() -> ResponseReturnValue:
    """Who the shop thinks is calling (an async view)."""
    user = current_user.name if current_user.is_authenticated else None
    return {"user": user, "method": request.method, "path": request.path}


@view_tool(mcp)
def broken() -> ResponseReturnValue:
    raise RuntimeError("database password is hunter2")


@view_tool(mcp)
def moved() -> ResponseReturnValue:
    return redirect("/somewhere/else")


@view_tool(mcp)
def teapot() -> ResponseReturnValue:
    return "short and stout", 418, {"Content-Type": "text/plain"}


@view_tool(mcp)
def invoice() -> ResponseReturnValue:
    return Response(b"%PDF-1.7", mimetype="application/pdf")


@view_tool(mcp)
def price_list() -> ResponseReturnValue:
    return send_file(io.BytesIO(b"teapot 12.00"), mimetype="text/plain")


@view_tool(mcp, arguments={"code": int})
def refuse_with_reason() -> ResponseReturnValue:
    """``abort(code, description)``: the description is what Flask's error page tells the client."""
    abort(int(request.args["code"]), "The till is closed until 9:00 (database password is hunter2).")


@view_tool(mcp)
def template_page() -> ResponseReturnValue:
    return render_template_string("<main><h2>Hello {{ current_user.name }}</h2></main>")


@view_tool(mcp)
@permission_required(is_clerk)
def staff_note() -> ResponseReturnValue:
    return Response("for staff only", mimetype="text/plain")


class NoteForm(FlaskForm):  # type: ignore[misc]
    note = StringField(validators=[DataRequired()])


@view_tool(mcp, method="POST", arguments={"note": str})
@shop.post("/notes")
def add_note() -> ResponseReturnValue:
    """A Flask-WTF form's view (the form reads a JSON body too, and checks its own CSRF token)."""
    form = NoteForm()
    if not form.validate_on_submit():
        return {"errors": form.errors}, 400
    return {"note": form.note.data}


def clerks_only(view: Callable[..., ResponseReturnValue]) -> Callable[..., ResponseReturnValue]:
    """The app's own guard, as Flask-Login's docs write one: whoever fails it is sent to the login view."""

    @functools.wraps(view)
    def guarded(*args: object, **kwargs: object) -> ResponseReturnValue:
        if not is_clerk():
            return current_app.login_manager.unauthorized()  # type: ignore[attr-defined,no-any-return]
        return view(*args, **kwargs)

    return guarded


@view_tool(mcp)
@shop.get("/refunds")
@clerks_only
def refunds() -> ResponseReturnValue:
    """The day's refunds (clerks only)."""
    return {"refunds": 2}


def back_office_only(view: Callable[..., ResponseReturnValue]) -> Callable[..., ResponseReturnValue]:
    """The guard Flask's docs write (View Decorators), with a sign-in page of the app's own, not
    Flask-Login's login view: whoever fails it goes there, with the way back (``?next=``)."""

    @functools.wraps(view)
    def guarded(*args: object, **kwargs: object) -> ResponseReturnValue:
        if not is_clerk():
            return redirect(url_for("back_office_sign_in", next=request.url))
        return view(*args, **kwargs)

    return guarded


@view_tool(mcp)
@shop.get("/cash-drawer")
@back_office_only
def cash_drawer() -> ResponseReturnValue:
    """What the cash drawer holds (clerks only)."""
    return {"drawer": "120.00"}


@staff.before_request
def only_clerks() -> None:
    if not is_clerk():
        abort(403)


@view_tool(mcp)
@staff.get("/takings")
def takings() -> ResponseReturnValue:
    """The day's takings (the staff blueprint lets only clerks in)."""
    return {"total": "152.15"}


def ledger() -> ResponseReturnValue:
    """The shop's ledger: its URL lets only signed-in users in (the tool is of the bare view)."""
    return {"ledger": "Bob & Sons owe 120.00"}


view_tool(mcp, ledger)
shop.add_url_rule("/ledger", view_func=login_required(ledger))


async def vault() -> ResponseReturnValue:
    """The deeds: an async view its URL routes behind login_required (a synchronous wrapper)."""
    return {"vault": "the deeds"}


view_tool(mcp, vault)
shop.add_url_rule("/vault", view_func=login_required(vault))


class Safe(MethodView):
    """What the safe holds: its URL routes it behind login_required (the class given bare)."""

    def get(self) -> ResponseReturnValue:
        return {"safe": "the day's takings"}


view_tool(mcp, Safe, name="safe")
shop.add_url_rule("/safe", view_func=login_required(Safe.as_view("safe")))


model_tools(
    mcp,
    Order,
    fields=["number", "customer", "status", "total", "placed", "owner_id"],
    filters=["status", "owner_id"],
    search=["customer", "number"],
    ordering=["-placed"],
    page_size=2,
    query=lambda: select(Order) if is_clerk() else select(Order).where(Order.owner_id == current_user.id),
    permission=lambda: current_user.is_authenticated,
)


def create_app(app: Flask, csrf: bool = False) -> Flask:
    """``app`` (with ``SQLALCHEMY_DATABASE_URI`` set) as the shop, its tables created; with
    ``csrf``, behind Flask-WTF's ``CSRFProtect`` (set up first, as the README says)."""
    if csrf:
        from flask_wtf.csrf import CSRFProtect

        CSRFProtect(app)
    db.init_app(app)
    manager = LoginManager(app)
    manager.login_view = "login_page"
    manager.user_loader(lambda user_id: db.session.get(User, int(user_id)))

    @manager.request_loader
    def bearer(request: Request) -> User | None:
        name = request.headers.get("Authorization", "").removeprefix("Bearer ")
        return db.session.scalars(select(User).where(User.name == name)).first()

    @app.before_request
    def name_the_shop() -> None:
        g.shop_name = "Teapot Shop"

    @app.post("/login/<name>")
    def login(name: str) -> str:
        return str(login_user(db.session.scalars(select(User).where(User.name == name)).one()))

    @app.get("/login")
    def login_page() -> str:
        return "<form>Sign in</form>"

    @app.get("/back-office/sign-in")
    def back_office_sign_in() -> str:
        return "<form>Back office: sign in</form>"

    app.url_map.converters["yyyy"] = FourDigitYearConverter
    app.url_map.converters["order"] = OrderConverter
    app.register_blueprint(shop)
    app.register_blueprint(staff)
    app.register_blueprint(branches)
    MCP(app, server=mcp)
    MCP.migrate(app)
    with app.app_context():
        db.create_all()
    return app
