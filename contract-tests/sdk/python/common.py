"""One line per check, for contract-tests/sdk/run.mjs to count."""
import traceback


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
