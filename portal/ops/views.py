"""Health, readiness and metrics endpoints for load balancers, orchestrators and Prometheus."""

from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client.exposition import choose_encoder

from portal.ops.access import Verdict, metrics_access
from portal.ops.metrics import SECTIONS, registry
from portal.ops.readiness import CHECKS, readiness


@require_GET
def healthz(request):
    """The process is up and serving requests; checks nothing else."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request):
    """200 when the database, the broker and the scheduling pass are fine, else 503 naming
    the failing checks. `?exclude=scheduling_pass` (repeatable or comma-separated) leaves
    checks out, as Kubernetes' /readyz does: a load balancer should not take every web
    process out of service because beat stopped."""
    excluded = _names(request, "exclude")
    unknown = sorted(excluded - CHECKS.keys())
    if unknown:
        return _bad_request("unknown_check", f"No such check: {', '.join(unknown)}.")
    ok, body = readiness(exclude=excluded)
    return JsonResponse(body, status=200 if ok else 503)


@never_cache
@require_GET
def metrics(request):
    """Prometheus exposition of cluster-wide metrics; a bearer token or an allowed network.

    `?collect=cluster` or `?collect=gpus` (node_exporter's collect[] parameter) limits
    the answer to one section, so the per-GPU series can be scraped in a job of their own.
    """
    verdict = metrics_access(request.META)
    if verdict is Verdict.NO_CREDENTIALS:
        response = HttpResponse("Authentication required.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="berth-metrics"'
        return response
    if verdict is Verdict.WRONG_TOKEN:
        return HttpResponse("Invalid metrics token.\n", status=403, content_type="text/plain")
    wanted = _names(request, "collect", "collect[]") or set(SECTIONS)
    unknown = sorted(wanted - set(SECTIONS))
    if unknown:
        return _bad_request("unknown_section", f"No such metrics section: {', '.join(unknown)}.")
    sections = tuple(s for s in SECTIONS if s in wanted)
    encoder, content_type = choose_encoder(request.META.get("HTTP_ACCEPT", ""))
    return HttpResponse(encoder(registry(sections=sections)), content_type=content_type)


def _names(request, *params: str) -> set[str]:
    """The values of repeatable, comma-separated query parameters."""
    return {
        name.strip()
        for param in params
        for value in request.GET.getlist(param)
        for name in value.split(",")
        if name.strip()
    }


def _bad_request(code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message}}, status=400)
