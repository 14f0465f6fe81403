"""The one error type of data preparation."""


class PrepareError(ValueError):
    """Input or flags that cannot be converted; the message is one line naming the file,
    line, column or flag at fault and what was expected."""
