"""Calls a live mashbox through the client openapi-generator (-g python) made from openapi.json.

Usage: check_openapi_generator_python.py GENERATED_DIR BASE_URL MODEL_ID
Prints one "ok NAME" or "FAIL NAME: why" line per check (contract-tests/sdk/run.mjs counts them).
"""
import json
import sys

sys.path.insert(0, sys.argv[1])
from common import run_sdk_checks, sse_data  # noqa: E402  (contract-tests/sdk/python/common.py)

import mashbox_og as sdk  # noqa: E402
from mashbox_og.exceptions import BadRequestException  # noqa: E402

base_url, model_id = sys.argv[2], sys.argv[3]
api = sdk.ApiClient(sdk.Configuration(host=base_url))
question = "Name three planets."


def user_chat_message():
    return sdk.ChatMessage(role="user", content=sdk.ChatMessageContent(question))


def user_anthropic_message():
    return sdk.AnthropicInputMessage(role="user", content=sdk.AnthropicInputMessageContent(question))


def models():
    listed = sdk.ModelsApi(api).list_models()
    assert isinstance(listed, sdk.OpenAIModelList), type(listed)
    assert [x.id for x in listed.data] == [model_id], [x.id for x in listed.data]


def chat():
    out = sdk.ChatApi(api).create_chat_completion(sdk.ChatCompletionRequest(model=model_id, messages=[user_chat_message()], max_tokens=8))
    assert isinstance(out, sdk.ChatCompletion), type(out)
    choice = out.choices[0]
    assert out.object == "chat.completion" and out.id.startswith("chatcmpl-")
    assert isinstance(choice.message.content, str) and choice.message.content != ""
    assert choice.finish_reason in ("stop", "length"), choice.finish_reason
    assert 1 <= out.usage.completion_tokens <= 8 and out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens


def chat_refuses_logprobs():
    try:
        sdk.ChatApi(api).create_chat_completion(sdk.ChatCompletionRequest(messages=[user_chat_message()], logprobs=True))
    except BadRequestException as e:
        error = json.loads(e.body)["error"]
        assert error["param"] == "logprobs" and error["code"] == "unsupported_field", error
        return
    raise AssertionError("logprobs: true was accepted")


def completion():
    body = sdk.TextCompletionRequest(prompt=sdk.TextCompletionRequestPrompt("Once upon a time"), max_tokens=8)
    out = sdk.CompletionsApi(api).create_completion(body)
    assert isinstance(out, sdk.TextCompletion), type(out)
    assert out.object == "text_completion" and isinstance(out.choices[0].text, str)
    assert 1 <= out.usage.completion_tokens <= 8


def message():
    out = sdk.MessagesApi(api).create_message(sdk.AnthropicMessagesRequest(model=model_id, max_tokens=8, messages=[user_anthropic_message()]))
    assert isinstance(out, sdk.AnthropicMessage), type(out)
    block = out.content[0].actual_instance
    assert out.id.startswith("msg_") and isinstance(block, sdk.AnthropicTextBlock) and block.text != "", out
    assert out.stop_reason is not None and 1 <= out.usage.output_tokens <= 8


def count_tokens():
    out = sdk.MessagesApi(api).count_message_tokens(sdk.AnthropicCountTokensRequest(messages=[user_anthropic_message()]))
    assert isinstance(out, sdk.AnthropicTokenCount), type(out)
    assert out.input_tokens > 0


def response():
    body = sdk.ResponsesRequest(input=sdk.ResponsesRequestInput(question), max_output_tokens=8)
    out = sdk.ResponsesApi(api).create_response(body)
    assert isinstance(out, sdk.ResponsesResponse), type(out)
    assert out.id.startswith("resp_") and out.status in ("completed", "incomplete"), out.status
    item = out.output[-1].actual_instance
    assert isinstance(item, sdk.ResponsesMessageItem), item
    assert item.content[0].text != ""
    assert 1 <= out.usage.output_tokens <= 8


# Streams: each data line decodes into the generated union of the route's events (its
# actual_instance is the branch), so an event schema the client cannot read fails the check.


def chat_stream():
    body = sdk.ChatCompletionRequest(messages=[user_chat_message()], max_tokens=8, stream=True)
    text, finish = "", None
    for data in sse_data(base_url + "/v1/chat/completions", body.to_json()):
        event = sdk.ChatCompletionStreamPayload.from_json(data).actual_instance
        assert isinstance(event, sdk.ChatCompletionChunk), event
        for choice in event.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert text != "" and finish in ("stop", "length"), (text, finish)


def message_stream():
    body = sdk.AnthropicMessagesRequest(max_tokens=8, messages=[user_anthropic_message()], stream=True)
    kinds, text = [], ""
    for data in sse_data(base_url + "/v1/messages", body.to_json()):
        event = sdk.AnthropicStreamEvent.from_json(data).actual_instance
        kinds.append(type(event).__name__)
        if isinstance(event, sdk.AnthropicContentBlockDeltaEvent) and isinstance(event.delta.actual_instance, sdk.AnthropicTextDelta):
            text += event.delta.actual_instance.text
    assert kinds[0] == "AnthropicMessageStartEvent" and kinds[-1] == "AnthropicMessageStopEvent" and text != "", (kinds, text)


def response_stream():
    body = sdk.ResponsesRequest(input=sdk.ResponsesRequestInput(question), max_output_tokens=8, stream=True)
    kinds, text = [], ""
    for data in sse_data(base_url + "/v1/responses", body.to_json()):
        event = sdk.ResponsesStreamEvent.from_json(data).actual_instance
        kinds.append(type(event).__name__)
        if isinstance(event, sdk.ResponsesOutputTextDeltaEvent):
            text += event.delta
    assert kinds[0] == "ResponsesCreatedEvent" and kinds[-1] in ("ResponsesCompletedEvent", "ResponsesIncompleteEvent") and text != "", (kinds, text)


run_sdk_checks("openapi-generator-python", globals())
