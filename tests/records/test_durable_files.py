"""sync_file on an object store's writer, which has no descriptor: what it
wrote is flushed (its upload), and nothing fails for want of an fsync."""

import io

from transforms.records.durable_files import sync_file


def test_a_writer_without_a_descriptor_is_flushed_not_synced():
    flushed = []

    class Upload(io.BytesIO):
        def flush(self):
            flushed.append(True)

    sync_file(Upload(b"lines"))
    assert flushed == [True]
