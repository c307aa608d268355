/** The browser build's stand-in for the Node file store: a page has IndexedDB (or memory). */
import type { Store } from "./storage.js";

export const FileStore = {
  open(): Promise<Store> {
    return Promise.reject(new Error("no file system in a browser"));
  },
};
