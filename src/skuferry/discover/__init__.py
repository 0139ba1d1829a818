"""``skuferry init``: a config proposed from the export or API a user already has.

After Airbyte's ``discover`` (a catalog proposed from the source) and Pimcore's importer
preview: read a sample, propose, show, never decide in silence. The work in stages:

    read.py      the edge: a sample of the file or API (its first bytes, its first rows,
                 its first page), then the first records through the real source
    framing.py   how the bytes are framed: encoding, delimiter and quoting, the header
                 row of a sheet, the repeating element of an XML file, the records and
                 the next link of a JSON answer
    values.py    what a column's values are: numbers and their separators, dates and
                 their zone, GTINs, links, HTML, flags
    words.py     what a column's name means, in English, German, French, Spanish,
                 Italian and Dutch
    columns.py   records -> columns (a flat row's cells, a nested record's leaves as paths)
    key.py       the key: unique and non-empty in the sample, article numbers first
    fields.py    columns -> the product's fields, typed in the detected style
    known.py     the exports and APIs the presets know, and their mappings
    propose.py   all of it: a sample -> a ``Proposal`` (with its questions)
    render.py    a proposal -> the commented TOML the loader accepts
    preview.py   the edge: the written config read back through the sources and the
                 mapper: records as read, payloads, refused rows, the plan's counts

Everything but ``read.py`` and ``preview.py`` is pure: plain data in, plain data out.
Nothing here decides in silence: each finding says how sure it is and why, and what
cannot be decided is a ``Question`` the terminal asks or the config's comments say.
"""
