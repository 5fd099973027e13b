"""Fixtures of the UI test; ``IADEEP_UI_AIRFLOW_HOME`` + ``IADEEP_UI_AIRFLOW_PORT`` reuse an
``airflow standalone`` already running (e.g. ``make airflow``) instead of starting one."""
