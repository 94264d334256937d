"""`python -m learnerkit`: the same as the `learnerkit` command."""

from learnerkit.cli import main

main()
