"""The TOML files the plugin reads, each declared once as a pydantic model: skew matrices
(``fixtures/skew/*.toml``), run matrices (``fixtures/matrices/*.toml``) and cluster manifests
(``fixtures/clusters/*.toml``). ``toml_documents`` reads a file and turns every validation
problem into one ``SchemaError`` naming the file and the field."""
