"""The one exception type that reaches the user as a message, not a traceback."""


class ServelabError(Exception):
    """A problem the user can fix (bad flag, missing file, unreachable target).

    The CLI prints ``error: <message>`` and exits with code 2. The message must name the
    problem precisely: the file and line or byte, the flag, the URL.
    """
