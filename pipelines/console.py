"""Console logging for the pipeline commands."""

import logging


def configure_logging() -> None:
    """Our progress at INFO; Beam's and the clients' chatter only from WARNING.

    Beam logs type-hint conversions and runner choices at INFO, which buries
    the job's own progress lines.
    """
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("apache_beam", "py4j", "google"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
