"""``python -m iadeep.orchestration``: ``airflow standalone`` with the project's DAGs (``make airflow``)."""

from iadeep.orchestration._standalone import main

raise SystemExit(main())
