"""Console logging for the pipeline commands."""

import logging
import warnings


def configure_logging() -> None:
    """Our progress at INFO; Beam's and the clients' chatter only from WARNING.

    Beam logs type-hint conversions and runner choices at INFO, which buries
    the job's own progress lines; the Bigtable client warns on every
    connection to an emulator, which is what the tests and the generated
    runs use on purpose.
    """
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("apache_beam", "py4j", "google"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", "Connecting to Bigtable emulator")
