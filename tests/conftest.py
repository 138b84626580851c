"""Suite-wide set-up."""

import signal

# A shell that starts the suite in the background without job control (`cmd &` in a script) ignores
# SIGINT, and an ignored signal stays ignored across exec: the Ctrl-C tests' commands would never see
# theirs. A handled signal is reset to the default across exec, so each command gets its KeyboardInterrupt.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
