"""Calls a live mashbox through the client openapi-python-client generated from openapi.json.

Usage: check_openapi_python_client.py GENERATED_DIR BASE_URL MODEL_ID
Prints one "ok NAME" or "FAIL NAME: why" line per check (contract-tests/sdk/run.mjs counts them).
"""
import json
import os
import sys

sys.path.insert(0, sys.argv[1])
from common import run_sdk_checks, sse_data  # noqa: E402  (contract-tests/sdk/python/common.py)

from mashbox_client import AuthenticatedClient  # noqa: E402
from mashbox_client.api.chat import create_chat_completion  # noqa: E402
from mashbox_client.api.completions import create_completion  # noqa: E402
from mashbox_client.api.messages import count_message_tokens, create_message  # noqa: E402
from mashbox_client.api.models import list_models  # noqa: E402
from mashbox_client.api.responses import create_response  # noqa: E402
from mashbox_client import models as m  # noqa: E402

base_url, model_id = sys.argv[2], sys.argv[3]
# On loopback the server checks no key; the bearer scheme still makes this the client to use.
client = AuthenticatedClient(base_url=base_url, token="unused", raise_on_unexpected_status=True, timeout=120)
question = "Name three planets."


def models():
    listed = list_models.sync(client=client)
    assert isinstance(listed, m.OpenAIModelList), type(listed)
    assert [x.id for x in listed.data] == [model_id], [x.id for x in listed.data]


def chat():
    body = m.ChatCompletionRequest(
        model=model_id,
        messages=[m.ChatMessage(role=m.ChatMessageRole.USER, content=question)],
        max_tokens=8,
    )
    out = create_chat_completion.sync(client=client, body=body)
    assert isinstance(out, m.ChatCompletion), out
    choice = out.choices[0]
    assert out.object_ == "chat.completion" and out.id.startswith("chatcmpl-")
    assert isinstance(choice.message.content, str) and choice.message.content != ""
    assert choice.finish_reason.value in ("stop", "length"), choice.finish_reason
    assert 1 <= out.usage.completion_tokens <= 8 and out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens


def chat_refuses_logprobs():
    body = m.ChatCompletionRequest(messages=[m.ChatMessage(role=m.ChatMessageRole.USER, content=question)], logprobs=True)
    out = create_chat_completion.sync(client=client, body=body)
    assert isinstance(out, m.OpenAIError), out
    assert out.error.param == "logprobs" and out.error.code == "unsupported_field", out.error


def completion():
    out = create_completion.sync(client=client, body=m.TextCompletionRequest(prompt="Once upon a time", max_tokens=8))
    assert isinstance(out, m.TextCompletion), out
    assert out.object_ == "text_completion" and isinstance(out.choices[0].text, str)
    assert 1 <= out.usage.completion_tokens <= 8


def message():
    body = m.AnthropicMessagesRequest(
        model=model_id,
        max_tokens=8,
        messages=[m.AnthropicInputMessage(role=m.AnthropicInputMessageRole.USER, content=question)],
    )
    out = create_message.sync(client=client, body=body)
    assert isinstance(out, m.AnthropicMessage), out
    assert out.id.startswith("msg_") and out.role == "assistant"
    assert isinstance(out.content[0], m.AnthropicTextBlock) and out.content[0].text != ""
    assert out.stop_reason is not None and 1 <= out.usage.output_tokens <= 8


def count_tokens():
    body = m.AnthropicCountTokensRequest(messages=[m.AnthropicInputMessage(role=m.AnthropicInputMessageRole.USER, content=question)])
    out = count_message_tokens.sync(client=client, body=body)
    assert isinstance(out, m.AnthropicTokenCount), out
    assert out.input_tokens > 0


def response():
    out = create_response.sync(client=client, body=m.ResponsesRequest(input_=question, max_output_tokens=8))
    assert isinstance(out, m.ResponsesResponse), out
    assert out.id.startswith("resp_") and out.status.value in ("completed", "incomplete"), out.status
    item = out.output[-1]
    assert isinstance(item, m.ResponsesMessageItem), item
    assert isinstance(item.content[0], m.ResponsesOutputTextPart) and item.content[0].text != ""
    assert 1 <= out.usage.output_tokens <= 8


# Streams. openapi-python-client writes no class for a oneOf that no operation's JSON names (the
# event unions), only its branches: the branches come from the contract's own oneOf, and a data
# line must decode into exactly one of them (each branch's from_dict checks its `type` const).
CONTRACT = json.load(open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "openapi.json")))


def decode_event(union, data):
    branches = [getattr(m, b["$ref"].rsplit("/", 1)[1]) for b in CONTRACT["components"]["schemas"][union]["oneOf"]]
    decoded = []
    for branch in branches:
        try:
            decoded.append(branch.from_dict(json.loads(data)))
        except (KeyError, ValueError, TypeError):
            pass
    assert len(decoded) == 1, f"{union}: {len(decoded)} branches decode {data}"
    return decoded[0]


def chat_stream():
    body = m.ChatCompletionRequest(messages=[m.ChatMessage(role=m.ChatMessageRole.USER, content=question)], max_tokens=8, stream=True)
    text, finish = "", None
    for data in sse_data(base_url + "/v1/chat/completions", json.dumps(body.to_dict())):
        event = decode_event("ChatCompletionStreamPayload", data)
        assert isinstance(event, m.ChatCompletionChunk), event
        for choice in event.choices:
            text += choice.delta.content if isinstance(choice.delta.content, str) else ""
            finish = choice.finish_reason or finish
    assert text != "" and finish is not None, (text, finish)


def message_stream():
    body = m.AnthropicMessagesRequest(max_tokens=8, messages=[m.AnthropicInputMessage(role=m.AnthropicInputMessageRole.USER, content=question)], stream=True)
    kinds, text = [], ""
    for data in sse_data(base_url + "/v1/messages", json.dumps(body.to_dict())):
        event = decode_event("AnthropicStreamEvent", data)
        kinds.append(type(event).__name__)
        if isinstance(event, m.AnthropicContentBlockDeltaEvent) and isinstance(event.delta, m.AnthropicTextDelta):
            text += event.delta.text
    assert kinds[0] == "AnthropicMessageStartEvent" and kinds[-1] == "AnthropicMessageStopEvent" and text != "", (kinds, text)


def response_stream():
    body = m.ResponsesRequest(input_=question, max_output_tokens=8, stream=True)
    kinds, text = [], ""
    for data in sse_data(base_url + "/v1/responses", json.dumps(body.to_dict())):
        event = decode_event("ResponsesStreamEvent", data)
        kinds.append(type(event).__name__)
        if isinstance(event, m.ResponsesOutputTextDeltaEvent):
            text += event.delta
    assert kinds[0] == "ResponsesCreatedEvent" and kinds[-1] in ("ResponsesCompletedEvent", "ResponsesIncompleteEvent") and text != "", (kinds, text)


run_sdk_checks("openapi-python-client", globals())
