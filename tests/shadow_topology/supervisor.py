"""The topology's own ``supervisor`` module (also the import name of supervisord's package)."""


def tag(text: str) -> str:
    return f"{text}#user-supervisor"
