"""What both SSO backends share."""


class ActiveUsersOnly:
    """Sessions of deactivated users end: Django asks the backend that signed a session
    in for its user on every request, and neither django-auth-ldap's nor
    mozilla-django-oidc's get_user checks is_active (Django's ModelBackend does)."""

    def get_user(self, user_id):
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None
