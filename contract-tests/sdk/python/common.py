"""One line per check, for contract-tests/sdk/run.mjs to count; the SSE framing both scripts share."""
import json
import sys
import traceback
import urllib.request


class Checks:
    def __init__(self, sdk: str):
        self.sdk = sdk
        self.failed = 0

    def run(self, name, fn):
        try:
            fn()
            print(f"ok {self.sdk} {name}", flush=True)
        except Exception as e:  # a failed check is reported, the others still run
            self.failed += 1
            where = traceback.extract_tb(e.__traceback__)[-1]
            print(f"FAIL {self.sdk} {name}: {type(e).__name__}: {str(e)[:400]} (line {where.lineno})", flush=True)

    def exit_code(self):
        return 1 if self.failed else 0


# The checks every Python SDK runs, in this order: the line's name, and the function the SDK's
# script defines for it.
SDK_CHECKS = [
    ("listModels", "models"),
    ("createChatCompletion", "chat"),
    ("createChatCompletion logprobs 400", "chat_refuses_logprobs"),
    ("createCompletion", "completion"),
    ("createMessage", "message"),
    ("countMessageTokens", "count_tokens"),
    ("createResponse", "response"),
    ("createChatCompletion stream", "chat_stream"),
    ("createMessage stream", "message_stream"),
    ("createResponse stream", "response_stream"),
]


def sse_data(url, body_json):
    """POSTs a JSON body and yields each event's data (the text after "data: ") until the stream ends."""
    req = urllib.request.Request(url, data=body_json.encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.status == 200 and resp.headers["content-type"].startswith("text/event-stream"), resp.headers
        for line in resp:
            line = line.decode().rstrip("\r\n")
            if line.startswith("data: ") and line != "data: [DONE]":
                yield line[len("data: "):]


def run_sdk_checks(sdk, script_globals):
    """Runs SDK_CHECKS with the functions of the calling script (pass globals()), then exits."""
    checks = Checks(sdk)
    for name, fn in SDK_CHECKS:
        checks.run(name, script_globals[fn])
    sys.exit(checks.exit_code())
