// Allure 3.18's quality gate calls Iterator.prototype.toArray, which Node.js has from 22 on; on Node 20 (the
// oldest the report supports) it is added here, loaded with `node --import` before the Allure command line.
const IteratorPrototype = Object.getPrototypeOf(Object.getPrototypeOf([][Symbol.iterator]()));
if (typeof IteratorPrototype.toArray !== "function") {
  Object.defineProperty(IteratorPrototype, "toArray", {
    value: function toArray() {
      return Array.from(this);
    },
    writable: true,
    configurable: true,
  });
}
