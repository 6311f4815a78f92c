"""The fixed server surface the official MCP conformance suite drives.

`@modelcontextprotocol/conformance` (``node dist/index.js server --url ...``) is a
client that calls tools, resources and prompts with agreed names and checks the
answers. This module declares that surface once, as a plain `MCPServer`, so the
same object can be served by the SDK's own Starlette app (the reference run,
see ``main`` below) and by this project's Django and Flask transports.

Names, payloads and texts follow the scenario sources of the suite
(``src/scenarios/server/*.ts``); the comments say which scenario looks at what.
Nothing here is transport specific except `MemoryEventStore` and `build_app`,
which only the reference Starlette run uses.

Run the reference server::

    python example_project/servers/conformance.py --port 3001
    # endpoint: http://127.0.0.1:3001/mcp
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import itertools
import json
import logging
import os
import warnings
from typing import TYPE_CHECKING, Annotated, Any

import mcp_types as types
from mcp.server import MCPServer
from mcp.server.mcpserver import (
    Context,
    Elicit,
    ElicitationResult,
    RequestStateSecurity,
    Resolve,
    UserMessage,
)
from mcp.server.mcpserver.tools import Tool
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from pydantic import BaseModel, Field

from mcp_common import _sdk

if TYPE_CHECKING:
    from starlette.applications import Starlette

logger = logging.getLogger(__name__)

# Logging, sampling and roots are deprecated in the 2026-07-28 revision, but the
# 2025-11-25 scenarios still exercise them; keep the SDK's deprecation warnings
# about *our* calls out of the server log without hiding anyone else's.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning, module=__name__)

SERVER_NAME = "mcp-conformance-test-server"

# A 1x1 PNG and a tiny WAV header: the scenarios only check type and mimeType.
PNG_1X1_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV_STUB_B64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="


def _request_state_keys() -> list[bytes]:
    """Shared request-state key: every worker must unseal what another sealed.

    MCPServer's default key is per process, so a multi-worker deployment of
    this server (gunicorn, several runserver threads are fine) would reject
    the `requestState` of the input-required scenarios. The fixture key is
    derived, not secret: the conformance server guards nothing.
    """
    secret = os.environ.get("MCP_CONFORMANCE_STATE_KEY", "mcp-conformance-fixture-request-state")
    return [hashlib.sha256(secret.encode()).digest()]


# The 2020-12 keywords `json-schema-2020-12.ts` expects to survive tools/list
# untouched ($schema, $defs + $anchor, allOf/anyOf, if/then/else,
# additionalProperties).
JSON_SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


def json_schema_2020_12_tool() -> str:
    """Carries a JSON Schema 2020-12 inputSchema (SEP-1613 / SEP-2106)."""
    return "json_schema_2020_12_tool"


def _schema_preserving_tool() -> Tool:
    """Register the 2020-12 tool with a hand-written inputSchema.

    `@mcp.tool()` derives the schema from the signature and has no override,
    so build the public `Tool` record and swap its `parameters` before handing
    it to the constructor.
    """
    tool = Tool.from_function(json_schema_2020_12_tool)
    return tool.model_copy(update={"parameters": JSON_SCHEMA_2020_12})


mcp: MCPServer[Any] = MCPServer(
    SERVER_NAME,
    version="1.0.0",
    # MCPServer configures logging itself; INFO would log every session.
    log_level="WARNING",
    instructions="Conformance fixture: every tool, resource and prompt exists for one suite scenario.",
    request_state_security=RequestStateSecurity(keys=_request_state_keys()),
    tools=[_schema_preserving_tool()],
)


# --------------------------------------------------------------------------
# Content tools: tools-call-simple-text, -image, -audio, -embedded-resource,
# -mixed-content, -error (both wires).
# --------------------------------------------------------------------------


@mcp.tool()
def test_simple_text() -> str:
    """Return one text block."""
    return "This is a simple text response for testing."


@mcp.tool()
def test_image_content() -> list[types.ImageContent]:
    """Return one PNG image block."""
    return [types.ImageContent(type="image", data=PNG_1X1_B64, mime_type="image/png")]


@mcp.tool()
def test_audio_content() -> list[types.AudioContent]:
    """Return one WAV audio block."""
    return [types.AudioContent(type="audio", data=WAV_STUB_B64, mime_type="audio/wav")]


@mcp.tool()
def test_embedded_resource() -> list[types.EmbeddedResource]:
    """Return one embedded text resource."""
    contents = types.TextResourceContents(
        uri="test://embedded-resource",
        mime_type="text/plain",
        text="This is an embedded resource content.",
    )
    return [types.EmbeddedResource(type="resource", resource=contents)]


@mcp.tool()
def test_multiple_content_types() -> list[types.TextContent | types.ImageContent | types.EmbeddedResource]:
    """Return text, image and embedded resource in one result."""
    return [
        types.TextContent(type="text", text="Multiple content types test:"),
        types.ImageContent(type="image", data=PNG_1X1_B64, mime_type="image/png"),
        types.EmbeddedResource(
            type="resource",
            resource=types.TextResourceContents(
                uri="test://mixed-content-resource",
                mime_type="application/json",
                text='{"test": "data", "value": 123}',
            ),
        ),
    ]


@mcp.tool()
def test_error_handling() -> str:
    """Fail on purpose: the suite wants `isError: true` plus a message, not a JSON-RPC error."""
    raise RuntimeError("This tool intentionally returns an error for testing")


# --------------------------------------------------------------------------
# Notifications during a call: tools-call-with-progress (both wires),
# tools-call-with-logging (legacy), sep-2575-server-no-log-without-loglevel.
# --------------------------------------------------------------------------


@mcp.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Report 0, 50 and 100 of 100, pausing so the frames arrive separately."""
    for step in (0, 50, 100):
        await ctx.report_progress(progress=step, total=100, message=f"Completed step {step} of 100")
        if step < 100:
            await asyncio.sleep(0.05)
    return "Progress reporting completed"


async def _three_log_lines(ctx: Context) -> None:
    for text in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.log("info", text)
        if not text.endswith("completed"):
            await asyncio.sleep(0.05)


@mcp.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Send three info log notifications about 50 ms apart."""
    await _three_log_lines(ctx)
    return "Tool with logging executed successfully"


@mcp.tool()
async def test_logging_tool(ctx: Context) -> str:
    """Try to log on the 2026 wire without a `_meta` logLevel opt-in.

    The server-stateless scenario asserts that *no* notifications/message
    frame reaches the response stream; the SDK drops them, the tool still
    answers quickly (the suite reads for 500 ms).
    """
    await _three_log_lines(ctx)
    return "Logging tool finished"


# --------------------------------------------------------------------------
# Server-to-client requests in the middle of a call (2025-11-25 wire only):
# tools-call-sampling, tools-call-elicitation, elicitation-sep1034-defaults,
# elicitation-sep1330-enums. The request must ride the POST stream of the
# call (related request id); the client answers with a separate POST.
# --------------------------------------------------------------------------


@mcp.tool()
async def test_sampling(prompt: str, ctx: Context) -> str:
    """Ask the client's LLM and echo its answer."""
    try:
        # related_request_id puts the request on this call's stream; without it
        # the SDK would use the standalone GET stream, which may not be open.
        result = await ctx.session.create_message(
            messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))],
            max_tokens=100,
            related_request_id=ctx.request_id,
        )
    except Exception as exc:  # the scenario only needs *some* content back
        return f"Sampling not supported or error: {exc}"
    answer = result.content.text if result.content.type == "text" else "No response"
    return f"LLM response: {answer}"


class ContactDetails(BaseModel):
    """What tools-call-elicitation's client answers with."""

    username: str = Field(description="User's response")
    email: str = Field(description="User's email address")


def _describe(result: ElicitationResult[Any]) -> str:
    content = result.data.model_dump_json() if result.action == "accept" else "{}"
    return f"action={result.action}, content={content}"


@mcp.tool()
async def test_elicitation(message: str, ctx: Context) -> str:
    """Ask the user for a name and e-mail address."""
    try:
        result = await ctx.elicit(message=message, schema=ContactDetails)
    except Exception as exc:
        return f"Elicitation not supported or error: {exc}"
    return f"User response: {_describe(result)}"


class ProfileWithDefaults(BaseModel):
    """SEP-1034: a default on every primitive type."""

    name: str = Field(default="John Doe", description="User name")
    age: int = Field(default=30, description="User age")
    score: float = Field(default=95.5, description="User score")
    status: str = Field(
        default="active",
        description="User status",
        json_schema_extra={"enum": ["active", "inactive", "pending"]},
    )
    verified: bool = Field(default=True, description="Verification status")


@mcp.tool()
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Elicit with defaults for string, integer, number, enum and boolean."""
    try:
        result = await ctx.elicit(message="Please provide user information", schema=ProfileWithDefaults)
    except Exception as exc:
        return f"Elicitation not supported or error: {exc}"
    return f"Elicitation result: {_describe(result)}"


def _titled(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"const": value, "title": title} for value, title in pairs]


class EnumVariants(BaseModel):
    """SEP-1330: the five enum shapes, with the option values the suite answers with."""

    untitledSingle: str = Field(
        description="Untitled single-select",
        json_schema_extra={"enum": ["option1", "option2", "option3"]},
    )
    titledSingle: str = Field(
        description="Titled single-select",
        json_schema_extra={
            "oneOf": _titled(("value1", "First Option"), ("value2", "Second Option"), ("value3", "Third Option"))
        },
    )
    legacyEnum: str = Field(
        description="Legacy titled enum (enumNames)",
        json_schema_extra={
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
    )
    untitledMulti: list[str] = Field(
        description="Untitled multi-select",
        json_schema_extra={"items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
    )
    titledMulti: list[str] = Field(
        description="Titled multi-select",
        json_schema_extra={
            "items": {
                "anyOf": _titled(("value1", "First Choice"), ("value2", "Second Choice"), ("value3", "Third Choice"))
            }
        },
    )


@mcp.tool()
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Elicit with every enum variant of SEP-1330."""
    try:
        result = await ctx.elicit(message="Please select values using different enum schema types", schema=EnumVariants)
    except Exception as exc:
        return f"Elicitation not supported or error: {exc}"
    return f"Elicitation completed: {_describe(result)}"


# --------------------------------------------------------------------------
# Resumability (server-sse-polling, 2025-11-25): the tool drops its own SSE
# stream after one event; the client resumes with GET + Last-Event-ID and must
# get the rest, the result included.
# --------------------------------------------------------------------------


@mcp.tool()
async def test_reconnection(ctx: Context) -> str:
    """Close this call's SSE stream mid-call, then finish."""
    await ctx.log("info", "Before disconnect")
    # A no-op on transports without an event store; then the result simply
    # arrives on the original stream and the scenario reports INFO only.
    await ctx.close_sse_stream()
    # Give the client time to notice the close and reconnect before the
    # remaining events are produced.
    await asyncio.sleep(0.2)
    await ctx.log("info", "After reconnect")
    return "Reconnection test completed"


# --------------------------------------------------------------------------
# 2026-07-28 diagnostics used by server-stateless and
# http-custom-header-server-validation.
# --------------------------------------------------------------------------


@mcp.tool()
async def test_missing_capability(ctx: Context) -> str:
    """Refuse with -32021 unless the request declared the sampling capability."""
    caps = ctx.client_capabilities
    if caps is None or caps.sampling is None:
        # MCPError is re-raised by tool dispatch, so this becomes a top-level
        # JSON-RPC error (HTTP 400 on the 2026 wire), not an isError result.
        raise MCPError(
            code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            message="This tool requires the client 'sampling' capability",
            data={"requiredCapabilities": {"sampling": {}}},
        )
    return "Client declared sampling capability; proceeding."


@mcp.tool()
def test_x_mcp_header(
    region: Annotated[
        str,
        Field(
            description="Mirrored into the Mcp-Param-Region request header",
            json_schema_extra={"x-mcp-header": "Region"},
        ),
    ] = "<none>",
) -> str:
    """Echo an argument that clients must mirror into `Mcp-Param-Region` (SEP-2243).

    http-custom-header-server-validation skips unless some tool carries an
    `x-mcp-header` annotation; the SDK then rejects missing or mismatched
    headers with -32020.
    """
    return f"region={region}"


class Nickname(BaseModel):
    """Answer to test_streaming_elicitation's question."""

    nickname: str = Field(description="How should we call you?")


def ask_nickname() -> Elicit[Nickname]:
    """Resolver: the one question test_streaming_elicitation asks."""
    return Elicit("What should we call you?", Nickname)


@mcp.tool()
async def test_streaming_elicitation(
    answer: Annotated[ElicitationResult[Nickname], Resolve(ask_nickname)],
) -> str:
    """Need user input without ever sending a request on the response stream.

    sep-2575-http-server-no-independent-requests-on-stream reads the 2026
    response stream and fails on any server-to-client *request* frame. A
    resolver does the right thing per wire: an `input_required` result on
    2026-07-28, a mid-call `elicitation/create` on 2025-11-25.
    """
    if answer.action != "accept":
        return f"No nickname ({answer.action})"
    return f"Hello, {answer.data.nickname}!"


# --------------------------------------------------------------------------
# subscriptions/listen (2026-07-28): server-stateless opens a listen stream,
# then calls these to make a list change happen and expects the matching
# notification (and only the subscribed kinds) on that stream.
# --------------------------------------------------------------------------


def _transient_tool() -> str:
    """Exists only for an instant inside test_trigger_tool_change."""
    return "transient"


def _transient_prompt() -> str:
    """Exists only for an instant inside test_trigger_prompt_change."""
    return "transient"


# Unique names keep overlapping trigger calls from colliding.
_transient_ids = itertools.count(1)


@mcp.tool()
async def test_trigger_tool_change(ctx: Context) -> str:
    """Add and remove a tool, then announce tools/list_changed."""
    name = f"test_transient_tool_{next(_transient_ids)}"
    mcp.add_tool(_transient_tool, name=name)
    mcp.remove_tool(name)
    await ctx.notify_tools_changed()
    return "tool list changed"


@mcp.tool()
async def test_trigger_prompt_change(ctx: Context) -> str:
    """Add and remove a prompt, then announce prompts/list_changed."""
    name = f"test_transient_prompt_{next(_transient_ids)}"
    mcp.prompt(name=name, description="transient")(_transient_prompt)
    mcp.remove_prompt(name)
    await ctx.notify_prompts_changed()
    return "prompt list changed"


# --------------------------------------------------------------------------
# Input-required results (SEP-2322, 2026-07-28 wire): input-required-result-*.
# The scenarios look for fixed input keys (user_name, ...) so these tools
# build their InputRequiredResult by hand instead of using resolvers, whose
# keys are derived from the resolver's qualified name.
# --------------------------------------------------------------------------


def _ask(message: str, field: str, field_type: str = "string") -> types.ElicitRequest:
    schema = {"type": "object", "properties": {field: {"type": field_type}}, "required": [field]}
    return types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))


def _sample(text: str, max_tokens: int) -> types.CreateMessageRequest:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=text))
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(messages=[message], max_tokens=max_tokens)
    )


def _accepted_field(answer: object, field: str) -> Any:
    """The field of an accepted elicitation answer, or None for anything else."""
    if isinstance(answer, types.ElicitResult) and answer.action == "accept" and answer.content:
        return answer.content.get(field)
    return None


@mcp.tool()
async def test_input_required_result_elicitation(ctx: Context) -> str | types.InputRequiredResult:
    """Ask for a name under the key `user_name`, then greet.

    Also serves -missing-input-response (a wrong key must re-ask),
    -ignore-extra-params (unknown keys are ignored), -validate-input and
    -result-type.
    """
    answer = (ctx.input_responses or {}).get("user_name")
    name = _accepted_field(answer, "name")
    if name is None:
        return types.InputRequiredResult(input_requests={"user_name": _ask("What is your name?", "name")})
    return f"Hello, {name}!"


@mcp.tool()
async def test_input_required_result_sampling(ctx: Context) -> str | types.InputRequiredResult:
    """Ask the client's model a question, then report the answer."""
    answer = (ctx.input_responses or {}).get("capital_question")
    if not isinstance(answer, types.CreateMessageResult):
        return types.InputRequiredResult(
            input_requests={"capital_question": _sample("What is the capital of France?", 100)}
        )
    text = answer.content.text if answer.content.type == "text" else "?"
    return f"Model said: {text}"


@mcp.tool()
async def test_input_required_result_list_roots(ctx: Context) -> str | types.InputRequiredResult:
    """Ask for the client's roots, then count them."""
    answer = (ctx.input_responses or {}).get("client_roots")
    if not isinstance(answer, types.ListRootsResult):
        return types.InputRequiredResult(input_requests={"client_roots": types.ListRootsRequest()})
    return f"Client exposed {len(answer.roots)} root(s)."


_CONFIRM_STATE = "awaiting-confirmation"


@mcp.tool()
async def test_input_required_result_request_state(ctx: Context) -> str | types.InputRequiredResult:
    """Round-trip a requestState; the SDK seals it, we see it in plain text."""
    if ctx.request_state == _CONFIRM_STATE and "confirm" in (ctx.input_responses or {}):
        return "state-ok: confirmation received"
    return types.InputRequiredResult(
        input_requests={"confirm": _ask("Please confirm", "ok", "boolean")},
        request_state=_CONFIRM_STATE,
    )


@mcp.tool()
async def test_input_required_result_multiple_inputs(ctx: Context) -> str | types.InputRequiredResult:
    """Ask for elicitation, sampling and roots in one round."""
    wanted = {
        "user_name": _ask("What is your name?", "name"),
        "greeting": _sample("Generate a greeting", 50),
        "client_roots": types.ListRootsRequest(),
    }
    if wanted.keys() <= (ctx.input_responses or {}).keys():
        return "All inputs received."
    return types.InputRequiredResult(input_requests=wanted, request_state="multiple-inputs")


@mcp.tool()
async def test_input_required_result_multi_round(ctx: Context) -> str | types.InputRequiredResult:
    """Three rounds: name, then colour, then the answer; the state changes each round."""
    state = json.loads(ctx.request_state) if ctx.request_state else {}
    responses = ctx.input_responses or {}
    step = state.get("round")
    if step == 1 and (name := _accepted_field(responses.get("step1"), "name")) is not None:
        return types.InputRequiredResult(
            input_requests={"step2": _ask("Step 2: What is your favorite color?", "color")},
            request_state=json.dumps({"round": 2, "name": name}),
        )
    if step == 2 and (color := _accepted_field(responses.get("step2"), "color")) is not None:
        return f"{state.get('name')} likes {color}."
    # First round, or an answer that does not fit the state: start over.
    return types.InputRequiredResult(
        input_requests={"step1": _ask("Step 1: What is your name?", "name")},
        request_state=json.dumps({"round": 1}),
    )


@mcp.tool()
async def test_input_required_result_tampered_state(ctx: Context) -> str | types.InputRequiredResult:
    """Hand out a state; a tampered echo never reaches this body.

    The SDK's request-state boundary rejects it with -32602 first, which is
    what input-required-result-tampered-state checks.
    """
    if ctx.request_state is None:
        return types.InputRequiredResult(
            input_requests={"confirm": _ask("Please confirm", "ok", "boolean")},
            request_state="tamper-probe",
        )
    return f"state-ok: {ctx.request_state}"


@mcp.tool()
async def test_input_required_result_capabilities(ctx: Context) -> str | types.InputRequiredResult:
    """Only ask for what the client declared it can answer."""
    caps = ctx.client_capabilities
    requests: dict[str, types.InputRequest] = {}
    if caps is not None and caps.sampling is not None:
        requests["sample"] = _sample("Say hello", 50)
    if caps is not None and caps.elicitation is not None:
        requests["ask"] = _ask("What is your name?", "name")
    if not requests:
        return "Client declared neither sampling nor elicitation."
    if requests.keys() <= (ctx.input_responses or {}).keys():
        return "All declared inputs received."
    return types.InputRequiredResult(input_requests=requests, request_state="capability-gated")


# --------------------------------------------------------------------------
# Resources: resources-list, -read-text, -read-binary, -templates-read,
# -subscribe/-unsubscribe (legacy), sep-2164-resource-not-found (the SDK
# answers an unknown uri with -32602 and data.uri by itself).
# --------------------------------------------------------------------------


@mcp.resource("test://static-text", name="static-text", mime_type="text/plain")
def static_text() -> str:
    """A fixed text resource."""
    return "This is the content of the static text resource."


@mcp.resource("test://static-binary", name="static-binary", mime_type="image/png")
def static_binary() -> bytes:
    """A fixed binary resource (a 1x1 PNG), served as a base64 blob."""
    return base64.b64decode(PNG_1X1_B64)


@mcp.resource("test://template/{id}/data", name="template-data", mime_type="application/json")
def template_data(id: str) -> str:
    """A templated resource; the suite reads test://template/123/data and looks for 123."""
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@mcp.resource("test://watched-resource", name="watched-resource", mime_type="text/plain")
def watched_resource() -> str:
    """The resource the subscribe/unsubscribe scenarios name."""
    return "Watched resource content"


# --------------------------------------------------------------------------
# Prompts: prompts-list, prompts-get-*, input-required-result-non-tool-request.
# --------------------------------------------------------------------------


@mcp.prompt()
def test_simple_prompt() -> list[UserMessage]:
    """A prompt without arguments."""
    return [UserMessage("This is a simple prompt for testing.")]


@mcp.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
    """A prompt whose text carries both arguments."""
    return [UserMessage(f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")]


@mcp.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
    """A prompt that embeds the resource named by `resourceUri` (camelCase: the wire name)."""
    resource = types.TextResourceContents(
        uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
    )
    return [
        UserMessage(types.EmbeddedResource(type="resource", resource=resource)),
        UserMessage("Please process the embedded resource above."),
    ]


@mcp.prompt()
def test_prompt_with_image() -> list[UserMessage]:
    """A prompt that carries an image."""
    return [
        UserMessage(types.ImageContent(type="image", data=PNG_1X1_B64, mime_type="image/png")),
        UserMessage("Please analyze the image above."),
    ]


@mcp.prompt()
async def test_input_required_result_prompt(ctx: Context) -> list[UserMessage] | types.InputRequiredResult:
    """prompts/get can need input too: ask for context under `user_context`."""
    context = _accepted_field((ctx.input_responses or {}).get("user_context"), "context")
    if context is None:
        return types.InputRequiredResult(
            input_requests={"user_context": _ask("What context should the prompt use?", "context")}
        )
    return [UserMessage(f"Use the following context: {context}")]


# --------------------------------------------------------------------------
# Completion (completion-complete, both wires): an empty answer is enough,
# the capability and the result shape are what is checked.
# --------------------------------------------------------------------------


@mcp.completion()
async def complete_argument(
    ref: types.PromptReference | types.ResourceTemplateReference,
    argument: types.CompletionArgument,
    context: types.CompletionContext | None,
) -> types.Completion:
    """Offer no suggestions."""
    return types.Completion(values=[], total=0, has_more=False)


# --------------------------------------------------------------------------
# Legacy-only methods: logging-set-level, resources-subscribe,
# resources-unsubscribe. MCPServer has no decorator for them and the SDK's own
# guidance (mcp.server.extension.MethodBinding) is to add them on the low-level
# server; the 2026 wire answers them 404/-32601 before any handler runs.
# --------------------------------------------------------------------------

_subscribed_uris: set[str] = set()


async def _set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
    logger.info("client asked for log level %s", params.level)
    return types.EmptyResult()


async def _subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
    _subscribed_uris.add(str(params.uri))
    return types.EmptyResult()


async def _unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    _subscribed_uris.discard(str(params.uri))
    return types.EmptyResult()


def _install_legacy_methods(server: MCPServer[Any]) -> None:
    # Registering the handlers is also what advertises the `logging` and
    # `resources.subscribe` capabilities on the 2025 wire.
    # mcp 2.3.0's MCPServer has no public hook for these methods; the low-level server does,
    # and mcp_common._sdk owns the one private step of reaching it.
    lowlevel = _sdk.lowlevel_server(server)
    lowlevel.add_request_handler("logging/setLevel", types.SetLevelRequestParams, _set_level)
    lowlevel.add_request_handler("resources/subscribe", types.SubscribeRequestParams, _subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, _unsubscribe)


_install_legacy_methods(mcp)


# --------------------------------------------------------------------------
# Reference serving on the SDK's own Starlette app.
# --------------------------------------------------------------------------


class MemoryEventStore(EventStore):
    """Keeps every SSE event so a dropped stream can be replayed (SEP-1699).

    Without an event store the SDK sends no priming event and
    `ctx.close_sse_stream()` does nothing, and server-sse-polling passes only
    vacuously. Event ids are a global counter; a stream is identified by the
    id of any of its events.
    """

    def __init__(self) -> None:
        self._events: list[tuple[str, str, types.JSONRPCMessage | None]] = []
        self._ids = itertools.count(1)

    async def store_event(self, stream_id: str, message: types.JSONRPCMessage | None) -> str:
        event_id = str(next(self._ids))
        self._events.append((stream_id, event_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        stream_id = next((s for s, e, _ in self._events if e == last_event_id), None)
        if stream_id is None:
            return None
        after = int(last_event_id)
        for s, e, message in list(self._events):
            # Priming events (message None) carry no data worth replaying.
            if s == stream_id and int(e) > after and message is not None:
                await send_callback(EventMessage(message, e))
        return stream_id


def build_app(path: str = "/mcp", retry_ms: int = 100) -> Starlette:
    """The SDK's Starlette app for `mcp`, with resumability switched on."""
    return mcp.streamable_http_app(
        streamable_http_path=path,
        event_store=MemoryEventStore(),
        retry_interval=retry_ms,
    )


def main(argv: list[str] | None = None) -> None:
    """Serve the fixture on uvicorn: the reference the project's transports are compared to."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3001)
    parser.add_argument("--path", default="/mcp")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)

    import uvicorn  # only the reference run needs it

    logging.basicConfig(level=args.log_level.upper())
    uvicorn.run(build_app(args.path), host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
