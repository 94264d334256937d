"""The web console (docs/console.md): server-rendered pages over the same facade and views as the REST API,
mounted by the API's app at ``/ui/``."""
