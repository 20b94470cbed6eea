"""``python -m rocketstore.cli``: the ``rocketstore`` command."""

from rocketstore.cli import main

if __name__ == "__main__":  # pragma: no cover
    main(prog_name="rocketstore")
