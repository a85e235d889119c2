"""What a reader of `report.html` sees, for the tests that check it."""

from html.parser import HTMLParser


class Page(HTMLParser):
    """What a reader sees: table rows, plot headings and image sources."""

    def __init__(self, text: str):
        super().__init__()
        self.rows: list[list[str]] = []
        self.headings: list[str] = []
        self.images: list[str] = []
        self.text: list[str] = []
        self._tag = ""
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self._tag = tag
        if tag == "tr":
            self.rows.append([])
        elif tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_data(self, data):
        self.text.append(data)
        if self._tag == "td":
            self.rows[-1].append(data)
        elif self._tag == "h3":
            self.headings.append(data)

    def handle_endtag(self, tag):
        self._tag = ""
