/* Loaded before the body renders: styles for "JavaScript is on" apply at once. */
document.documentElement.classList.replace("no-js", "js");
