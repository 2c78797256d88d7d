"""The topology's own ``common`` module (the name of Gale's source folder ``common/``, which is ``gale``)."""

PREFIX = "user-common"
