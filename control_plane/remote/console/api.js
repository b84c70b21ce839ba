// The console's token and its calls to the JSON API (/api/...): the token is kept in the
// tab's sessionStorage and sent as a Bearer header.

const TOKEN_KEY = "acpctl.token";

export const auth = {
  token: sessionStorage.getItem(TOKEN_KEY),
  keep(token) {
    this.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
  },
  forget() {
    this.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
  },
};

export class Unauthorized extends Error {}

function headers() {
  return { Authorization: `Bearer ${auth.token}` };
}

export async function api(path) {
  const response = await fetch(path, { headers: headers() });
  if (response.status === 401) throw new Unauthorized("the token was refused");
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

// The answer whatever its status: {status, body} (body: the JSON, or {error} from the server).
export async function apiAnswer(path) {
  const response = await fetch(path, { headers: headers() });
  if (response.status === 401) throw new Unauthorized("the token was refused");
  let body = {};
  try {
    body = await response.json();
  } catch {
    body = { error: `HTTP ${response.status}` };
  }
  return { status: response.status, body };
}

// A download the browser saves (a link cannot carry the Authorization header).
export async function download(path, filename) {
  const response = await fetch(path, { headers: headers() });
  if (response.status === 401) throw new Unauthorized("the token was refused");
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  const url = URL.createObjectURL(await response.blob());
  const link = document.createElement("a");
  link.href = url;
  link.download = filename;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
