"""The topology's own ``nimbus`` module (the name of Gale's source folder ``nimbus/``)."""

SUFFIX = "@user-nimbus"
