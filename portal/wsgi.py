"""The WSGI application gunicorn serves (`gunicorn portal.wsgi`)."""

import gc
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_wsgi_application()
# What start-up made (modules, models, settings, the app registry) lives as long as the
# process: moved out of the cyclic collector's generations, so that its full collections,
# one every few bulk requests, stop traversing it (about 60 ms each on a 1,000-job bulk;
# docs/benchmarks.md, issue 19). gunicorn loads the application in each worker.
gc.freeze()
