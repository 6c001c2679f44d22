"""Health endpoints for load balancers and orchestrators."""

from django.http import JsonResponse
from django.views.decorators.http import require_GET


@require_GET
def healthz(request):
    """The process is up and serving requests; checks nothing else."""
    return JsonResponse({"status": "ok"})
