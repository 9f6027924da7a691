"""The one exception type for mistakes a user can make and fix."""


class UserInputError(ValueError):
    """Bad input from the user: a missing file, a config/data mismatch, a corrupt record.

    The message is one sentence that names the input and says how to fix it. Scripts print
    it without a traceback and exit non-zero.
    """
