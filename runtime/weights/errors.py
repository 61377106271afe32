"""The one error type of checkpoint reading and writing."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or read; the message names each file and tensor at fault.

    ``problems`` holds one line per problem (the message lists them all).
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = list(problems or [message])
