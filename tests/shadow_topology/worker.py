"""The topology's own ``worker`` module (the name of Gale's source folder ``worker/``)."""


def shout(word: str) -> str:
    return word.upper() + "!"
